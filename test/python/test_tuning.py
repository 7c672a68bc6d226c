"""`fusec --tune` and the tuning cache, built here without a GPU.

The tuner's timing runs on the GPU (runtime/timing.py, CUDA events; measured on the H200 by
bench/tune_gpu.py). Here the measurement is replaced by a stated table of times, so that
what the tuner does with times is tested: which candidate wins (and that the cost model's
tile stays unless another is MARGIN faster), that a candidate whose outputs differ is never
used, that the cache records the winner and every candidate's time, and that a later compile
without --tune builds the same artifact, byte for byte.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from fusec.compiler import driver, tuner  # noqa: E402
from fusec.runtime import tuning  # noqa: E402
from fusec.compiler.diagnostics import FusecError  # noqa: E402
from fusec.compiler.frontend import import_torch  # noqa: E402
from fusec.compiler.pipeline import CompileOptions  # noqa: E402
from fusec.compiler.targets.cpu.options import CpuOptions  # noqa: E402
from fusec.compiler.targets.cuda.options import CudaOptions  # noqa: E402
import fusec.runtime as runtime  # noqa: E402
from fusec.runtime import timing  # noqa: E402

KEY = "tc_gemm m=512 n=384 k=256 a=bf16 out=bf16 b=nk epilogue=cast+bias+gelu"


class LinearGelu(torch.nn.Module):
    def forward(self, x, w, b):
        return F.gelu(x @ w.t() + b)


@pytest.fixture(scope="module")
def linear_text() -> str:
    args = [torch.randn(s).bfloat16() for s in [(512, 256), (384, 256), (384,)]]
    with driver.quiet_torch_logs():
        return import_torch(LinearGelu().eval(), *args)


def _options(cache) -> CompileOptions:
    return CompileOptions(target="cuda", model_name="m",
                          cuda=CudaOptions(cubin=False, tuning=str(cache)))


def _fake_gpu(monkeypatch, times: dict, wrong: tuple = (), hangs: tuple = ()):
    """Stand in for the GPU: a launch's time is `times[tile]` (else 100 us); a tile in
    `wrong` gives outputs that differ (a kernel that tile breaks), one in `hangs` passes the
    time limit."""
    monkeypatch.setattr(runtime, "gpu_present", lambda: True)

    def time_isolated(path, seed=0, warmup=3, runs=20, timeout=None):
        module = runtime.load(path)
        us, tiles, out = {}, {}, [np.ones(8, np.float32)]
        for k in module.kernels:
            info = k["info"]
            if info.get("tune_key"):
                tile = tuple(info["tile"])
                us[info["tune_key"]] = times.get(tile, 100.0)
                tiles[info["tune_key"]] = list(tile)
                if tile in wrong:
                    out = [np.full(8, 2.0, np.float32)]
                if tile in hangs:
                    raise timing.TimingFailed(f"{path}: still running after 60 s (killed)")
        return timing.KernelTimes(us, tiles, out, sum(us.values()))

    monkeypatch.setattr(timing, "time_isolated", time_isolated)


def test_cache_round_trip_and_merge(tmp_path):
    path = str(tmp_path / "sub" / "tuning.json")
    assert tuning.load(path) == {}
    tuning.store(path, {"dev|a": {"tile": [1, 2]}})
    tuning.store(path, {"dev|b": {"tile": [3]}})
    assert tuning.load(path) == {"dev|a": {"tile": [1, 2]}, "dev|b": {"tile": [3]}}
    assert tuning.lookup(path, "dev", "b") == {"tile": [3]}
    before = tuning.fingerprint(path)
    tuning.store(path, {"dev|b": {"tile": [3], "measured_us": 1.0}})
    assert tuning.fingerprint(path) == before  # only the tiles change code
    tuning.store(path, {"dev|b": {"tile": [4]}})
    assert tuning.fingerprint(path) != before
    assert tuning.load("off") == {}


def test_a_file_that_is_not_a_cache_is_an_error(tmp_path):
    bad = tmp_path / "tuning.json"
    bad.write_text(json.dumps({"version": 99, "entries": {}}))
    with pytest.raises(ValueError, match="not a fusec tuning cache of version 1"):
        tuning.load(str(bad))
    bad.write_text("{")
    with pytest.raises(ValueError, match="not a fusec tuning cache"):
        tuning.load(str(bad))


def test_tune_records_the_fastest_and_a_later_compile_is_the_same_bytes(
        linear_text, tmp_path, monkeypatch):
    cache = tmp_path / "tuning.json"
    _fake_gpu(monkeypatch, {(64, 128, 64, 4): 50.0, (64, 256, 64, 2): 40.0,
                            (128, 64, 64, 4): 45.0})
    lines: list[str] = []
    meta = tuner.tune(linear_text, "<test>", _options(cache), str(tmp_path / "tuned.so"),
                      log=lines.append)
    (launch,) = meta["kernels"]
    assert launch["info"]["tile"] == [64, 256, 64, 2]
    assert launch["info"]["tile_from"].startswith("tuned: 40.0 us measured")
    entry = tuning.lookup(str(cache), "nvidia-h200", KEY)
    assert entry["tile"] == [64, 256, 64, 2] and entry["model_tile"] == [64, 128, 64, 4]
    assert entry["model_us"] == 50.0 and entry["predicted_us"] > 0
    # Every distinct candidate measured once, the model's first.
    tiles = [t for t, _ in entry["candidates"]]
    assert tiles[0] == [64, 128, 64, 4] and len(tiles) == len({tuple(t) for t in tiles}) == 6
    assert any("tuned [64, 256, 64, 2] 40.0 us (1.25x)" in line for line in lines)
    # Without --tune: the cache's tile, the same artifact.
    driver.compile_text(linear_text, "<test>", _options(cache), str(tmp_path / "again.so"))
    assert (tmp_path / "tuned.so").read_bytes() == (tmp_path / "again.so").read_bytes()
    # With the cache off: the model's tile.
    off = driver.compile_text(linear_text, "<test>", _options("off"), str(tmp_path / "m.so"))
    assert off["kernels"][0]["info"]["tile"] == [64, 128, 64, 4]
    assert off["kernels"][0]["info"]["tile_from"] == "cost model"


def test_noise_does_not_replace_the_model_tile(linear_text, tmp_path, monkeypatch):
    cache = tmp_path / "tuning.json"
    _fake_gpu(monkeypatch, {(64, 128, 64, 4): 50.0, (64, 256, 64, 2): 49.0})
    meta = tuner.tune(linear_text, "<test>", _options(cache), str(tmp_path / "t.so"),
                      log=lambda line: None)
    assert meta["kernels"][0]["info"]["tile"] == [64, 128, 64, 4]
    assert tuning.lookup(str(cache), "nvidia-h200", KEY)["tile"] == [64, 128, 64, 4]


def test_a_candidate_with_other_outputs_is_never_chosen(linear_text, tmp_path, monkeypatch):
    cache = tmp_path / "tuning.json"
    _fake_gpu(monkeypatch, {(64, 128, 64, 4): 50.0, (64, 256, 64, 2): 10.0,
                            (128, 64, 64, 4): 45.0}, wrong=((64, 256, 64, 2),))
    lines: list[str] = []
    meta = tuner.tune(linear_text, "<test>", _options(cache), str(tmp_path / "t.so"),
                      log=lines.append)
    assert meta["kernels"][0]["info"]["tile"] == [128, 64, 64, 4]
    assert any("outputs differ from the cost model's program" in line for line in lines)
    entry = tuning.lookup(str(cache), "nvidia-h200", KEY)
    assert [[64, 256, 64, 2], None] in entry["candidates"]


def test_a_candidate_that_hangs_is_reported_and_skipped(linear_text, tmp_path, monkeypatch):
    cache = tmp_path / "tuning.json"
    _fake_gpu(monkeypatch, {(64, 128, 64, 4): 50.0, (64, 256, 64, 2): 10.0,
                            (128, 64, 64, 4): 45.0}, hangs=((64, 256, 64, 2),))
    lines: list[str] = []
    meta = tuner.tune(linear_text, "<test>", _options(cache), str(tmp_path / "t.so"),
                      log=lines.append)
    assert meta["kernels"][0]["info"]["tile"] == [128, 64, 64, 4]
    assert any("failed" in line and "still running after 60 s" in line for line in lines)
    entry = tuning.lookup(str(cache), "nvidia-h200", KEY)
    assert [[64, 256, 64, 2], None] in entry["candidates"]


def test_timing_a_cpu_artifact_in_a_child_process(tmp_path):
    """The real measurement path (a child process, the runtime's profile) on the CPU: the
    matmul kernel's time under its key, the outputs as float32."""
    args = [torch.randn(s) for s in [(16, 32), (24, 32), (24,)]]
    with driver.quiet_torch_logs():
        text = import_torch(LinearGelu().eval(), *args)
    driver.compile_text(text, "<test>", CompileOptions(target="cpu"), str(tmp_path / "c.so"))
    t = timing.time_isolated(str(tmp_path / "c.so"), seed=3, runs=2)
    (key,) = t.us
    assert key.startswith("cpu_matmul m=16 n=24 k=32") and t.us[key] > 0 and t.total_us > 0
    (out,) = t.outputs
    module = runtime.load(str(tmp_path / "c.so"))
    x, w, b = (torch.from_numpy(a) for a in timing.random_inputs(module, seed=3))
    want = F.gelu(x.double() @ w.double().t() + b.double()).numpy()
    assert out.dtype == np.float32 and timing.relative_error(out, want) < 1e-5


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(768, 3072)

    def forward(self, x):
        return self.proj(x)


def test_cpu_tune_times_the_matmul_tilings_for_real(tmp_path):
    """The CPU target tuned end to end, nothing stood in for: a Linear whose B (9 MB) is
    larger than a core's L2, so its columns may be tiled; every candidate timed in a child
    process (two rounds), the winner recorded by the rule, then built from the cache."""
    cache = tmp_path / "tuning.json"
    lin = Linear().eval()
    with driver.quiet_torch_logs():
        text = import_torch(lin, torch.randn(128, 768))
    options = CompileOptions(target="cpu", cpu=CpuOptions(tuning=str(cache), threads=2))
    lines: list[str] = []
    meta = tuner.tune(text, "<test>", options, str(tmp_path / "tuned.so"), log=lines.append,
                      runs=3)
    (launch,) = [k for k in meta["kernels"] if k["info"].get("tune_key")]
    key = launch["info"]["tune_key"]
    assert key.startswith("cpu_matmul m=128 n=3072 k=768")
    from fusec.compiler.targets.cpu import tuning_device

    entry = tuning.lookup(str(cache), tuning_device(options.cpu), key)
    times = {tuple(t): us for t, us in entry["candidates"]}
    assert len(times) == launch["info"]["tile_candidates"] == 5
    assert all(us > 0 for us in times.values())
    assert entry["model_tile"] == [0, 384] and times[(0, 384)] == entry["model_us"]
    best = min(times.values())
    margin = max(tuner.MARGIN, entry["noise"])
    if entry["tile"] == entry["model_tile"]:
        assert best > entry["model_us"] * (1 - margin)
    else:
        assert times[tuple(entry["tile"])] <= entry["model_us"] * (1 - tuner.MARGIN)
    assert launch["info"]["tile"] == entry["tile"]
    assert any(line.startswith(f"fusec: tune: {key}: model [0, 384]") for line in lines)
    # The tuned artifact computes the Linear (against float64, fresh inputs), and a later
    # build is the same bytes.
    module = runtime.load(str(tmp_path / "tuned.so"))
    x = np.random.default_rng(5).standard_normal((128, 768)).astype(np.float32)
    with torch.no_grad():
        want = lin.double()(torch.from_numpy(x).double()).numpy()
    assert timing.relative_error(module(x), want) < 1e-5
    again = driver.compile_text(text, "<test>", options, str(tmp_path / "again.so"))
    assert (tmp_path / "tuned.so").read_bytes() == (tmp_path / "again.so").read_bytes()
    assert again["kernels"] == meta["kernels"]


def test_select_keeps_the_first_of_equal_tiles():
    counts = {"k": (3, 1.0)}
    measured = [tuner.Measured({"k": 10.0}, {"k": [1]}),
                tuner.Measured({"k": 5.0}, {"k": [1]}),  # the same tile again: not counted
                tuner.Measured({"k": 8.0}, {"k": [2]})]
    (report,) = tuner.select(counts, measured)
    assert report.tile == [2] and report.candidates == [([1], 10.0), ([2], 8.0)]


def test_tune_without_a_gpu_is_a_clear_error(tmp_path):
    mlir = tmp_path / "m.mlir"
    args = [torch.randn(s).bfloat16() for s in [(64, 64), (64, 64), (64,)]]
    with driver.quiet_torch_logs():
        mlir.write_text(import_torch(LinearGelu().eval(), *args))
    if runtime.gpu_present():
        pytest.skip("a GPU is here")
    cmd = [sys.executable, "-m", "fusec.tools.fusec", str(mlir), "-o", str(tmp_path / "m.so"),
           "--target", "cuda", "--tune"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 1
    assert "error: --tune times each candidate tile on the GPU" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "m.so").exists()
    # On the CPU the tuner runs here: this model's matmul is too small to tile by columns.
    r = subprocess.run(cmd[:-3] + ["--target", "cpu", "--tune",
                                   f"--cpu-tuning={tmp_path / 'cpu.json'}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "no tunable kernel (a matmul whose columns may be tiled)" in r.stderr
    assert (tmp_path / "m.so").exists()


def test_the_artifact_cache_key_follows_the_tuning_cache(tmp_path, monkeypatch):
    from fusec.compiler import api

    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    cache = tmp_path / "tuning.json"
    options = _options(cache)
    first = api._artifact_path(options, "source")
    tuning.store(str(cache), {f"nvidia-h200|{KEY}": {"tile": [64, 256, 64, 2]}})
    assert api._artifact_path(options, "source") != first
    cpu = CompileOptions(target="cpu")
    assert api._artifact_path(cpu, "source") == api._artifact_path(cpu, "source")
