"""`fusec --emit tiled --target cuda`: the H200's tiling of every example, and the report.

For target cuda the `tiled` stage is what the CUDA code generator lowers: kernels formed for
the GPU (cuBLASLt calls and views apart), each kernel group's root tiled for one block of the
H200, the group's producers fused into the tile loop, every value placed
(`#fusion.mem<...>`), each tile checked against the H200's limits (re-tiled or split when
over), and a tiling the tile emitter would not build undone with its reason. These tests run
the command line and the code generator on the examples (no GPU needed) and check that every
kernel is built from its tile: grid = tiles, block = the tile's threads.
"""

import json
import os
import re

import pytest

from fusec.passes import cost_model
from fusec.passes.tiling.tile import limit_tile_rows
from fusec.tools import fusec as fusec_cli

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
NAMES = sorted(n for n in os.listdir(EXAMPLES)
               if os.path.exists(os.path.join(EXAMPLES, n, "model.mlir")))


def _run(capsys, *argv: str) -> str:
    assert fusec_cli.main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def _groups(text: str) -> list[str]:
    """The text of each fusion.group's attribute dictionary line."""
    return [line for line in text.splitlines() if "= fusion.group " in line]


@pytest.mark.parametrize("name", NAMES)
def test_emit_tiled_cuda_shows_tiles_producers_and_placements(capsys, name):
    out = _run(capsys, os.path.join(EXAMPLES, name, "model.mlir"), "--emit", "tiled",
               "--target", "cuda")
    groups = _groups(out)
    assert groups
    kernels = [line for line in groups if "fusion.path" not in line]
    assert kernels or name == "mlp"  # the MLP is two cuBLASLt calls
    for line in groups:
        if "fusion.path" in line:  # a cuBLASLt call or a view: not tiled, placed or checked
            assert "fusion.tile_sizes" not in line and "fusion.threads" not in line, line
            continue
        if "fusion.untiled" in line or "fusion.fallback" in line:
            # The fallback path's (CNN's pad/window group, a transpose): the reason is
            # recorded.
            assert re.search(r'fusion.(untiled|fallback) = "[^"]+"', line), line
            continue
        # Placed and checked for the H200: threads per block, registers, a verdict.
        assert "fusion.threads = " in line and "fusion.registers = " in line, line
        assert 'fusion.capacity = "fits' in line or "over: occupancy" in line, line
        # Never a kernel over a hard limit: over shared memory or registers is re-tiled/split.
        assert "over: shared memory" not in line and "over: registers" not in line, line
        threads = int(re.search(r"fusion.threads = (\d+)", line).group(1))
        assert threads == int(re.search(r"fusion.block = (\d+)", line).group(1))
        assert 32 <= threads <= 1024 and threads % 32 == 0
    # Tiles: a tile loop whose body computes the fused producers and writes one slice.
    if any("fusion.tile_sizes" in line for line in kernels):
        assert "scf.forall" in out and "tensor.parallel_insert_slice" in out
        assert "#fusion.mem<global>" in out
    levels = set(re.findall(r"#fusion.mem<(\w+)>", out))
    assert levels <= {"global", "shared", "register"}


def _kernel_groups(module) -> list:
    """The groups that launch something: not views, not groups that only yield a weight
    (a folded reshape of one: the weight's buffer, no kernel)."""
    from fusec.compiler.targets.cuda.program import _yields_only_a_weight
    from fusec.passes.inline_groups import groups_in

    return [g for g in groups_in(module.operation)
            if not ("fusion.path" in g.attributes and
                    str(g.attributes["fusion.path"]) == '"view"')
            and _yields_only_a_weight(g) is None]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fusion", [True, False])
def test_cuda_kernels_are_built_from_their_tiles(name, fusion):
    """The CUDA code generator lowers the `tiled` stage: each group the stage tiled (or left
    as one tile) is one kernel whose grid is its tile count, whose block is the tile's
    threads, and whose tile sizes are the stage's. A group left untiled says why."""
    from mlir import ir

    from fusec.compiler.targets import cuda as codegen_cuda
    from fusec.compiler.pipeline import CompileOptions, lower
    from fusec.dialects import make_context

    with make_context(), ir.Location.unknown():
        with open(os.path.join(EXAMPLES, name, "model.mlir")) as f:
            module = ir.Module.parse(f.read())
        assert lower(module, CompileOptions(target="cuda", fusion=fusion), "tiled") == "tiled"
        expected = []
        for g in _kernel_groups(module):
            attrs = g.attributes
            if "fusion.path" in attrs:
                expected.append(("gemm", None))
            elif "fusion.fallback" in attrs:  # the fallback path's tiles, one per thread
                assert ir.StringAttr(attrs["fusion.tile_kind"]).value == "thread"
                expected.append(("thread", (ir.IntegerAttr(attrs["fusion.grid"]).value,
                                            ir.IntegerAttr(attrs["fusion.block"]).value)))
            elif "fusion.untiled" in attrs:
                assert ir.StringAttr(attrs["fusion.untiled"]).value
                expected.append(("untiled", None))
            else:
                sizes = list(ir.DenseI64ArrayAttr(attrs["fusion.tile_sizes"])) \
                    if "fusion.tile_sizes" in attrs else []
                expected.append(("tile", (ir.IntegerAttr(attrs["fusion.grid"]).value,
                                          ir.IntegerAttr(attrs["fusion.block"]).value, sizes)))
        plan = codegen_cuda.generate(module, codegen_cuda.CudaOptions(cubin=False)).plan
    launches = [k for k in plan.launches if k.symbol != "__copy__"]
    assert len(launches) == len(expected)
    tiled = 0
    for launch, (built, shape) in zip(launches, expected):
        if built == "gemm":
            assert launch.launch_kind == "gemm"
        elif built == "untiled":
            assert not launch.info.get("tiled")
        elif built == "thread":
            tiles, block = shape
            assert launch.info["path"] == "fallback" and launch.info["tiled"]
            assert launch.info["tiles"] == tiles and launch.block == block
            assert launch.grid == -(-tiles // block)
        else:
            tiled += 1
            assert launch.info["path"] == "fast" and launch.info["tiled"]
            assert (launch.grid, launch.block, launch.info["tile_sizes"]) == shape
    # mlp: GEMMs with their epilogues; cnn (fused): the im2col and pool kernels are data
    # movement (untiled), the convolution a GEMM.
    assert tiled >= 1 or name == "mlp" or (name == "cnn" and fusion)
    if fusion:  # every fused example's fast kernel is built from its tile
        assert tiled == sum(1 for k in launches if k.info.get("path") == "fast")


def test_softmax_is_one_block_per_row_with_the_row_on_chip(capsys):
    out = _run(capsys, os.path.join(EXAMPLES, "softmax", "model.mlir"), "--emit", "tiled",
               "--target", "cuda")
    (line,) = _groups(out)
    assert "fusion.tile_sizes = array<i64: 1, 0>" in line  # one row per block
    assert "fusion.grid = 64 : i64" in line and 'fusion.tile_kind = "row"' in line
    body = out[out.index("scf.forall"):]
    # The reductions run inside the tile loop (fused producers), not before it; the row stays
    # in the threads' registers between the passes, the row statistics go through shared
    # memory (combined across the block, read by every thread).
    assert "math.exp" in body and "arith.maximumf" in body and "arith.addf" in body
    assert "#fusion.mem<register>" in body and "#fusion.mem<shared>" in body


def test_report_gives_tiling_per_kernel_on_both_targets(capsys):
    path = os.path.join(EXAMPLES, "gpt2_block", "model.mlir")
    # On the H200 the GEMMs keep their bias adds (cuBLASLt epilogues) and the transposes the
    # fast emitter refuses are not merged horizontally: 10 planned kernels (V's head split is
    # planned apart from the QKV GEMM, which exports the whole QKV to Q's and K's splits; the
    # device splits it from the library call either way), 11 built; 10 on the CPU (its
    # attention kernel; the head split and merge kernels around it, the QKV projection a
    # kernel of its own and the head merge a copy in front of the output projection).
    for target, device, kernels, built in (("cuda", "nvidia-h200", 10, 11),
                                           ("cpu", "cpu", 10, 10)):
        data = json.loads(_run(capsys, path, "--report=json", "--target", target))
        assert data["device"] == device
        assert len(data["kernels"]) == kernels
        assert len(data["tiled_kernels"]) == built
        for t in data["tiled_kernels"]:
            if t["built"] == "cuBLASLt":
                assert t["threads"] is None and t["capacity"] is None
                continue
            if t["built"] == "attention":  # its family's kernel, tiled by its own pass
                assert target == "cpu" and t["kind"] == "attention"
            else:
                assert t["built"] == ("tile" if target == "cuda" else "")
            assert t["grid"] >= 1 and t["threads"] >= 1 and t["occupancy"] is not None
            assert t["capacity"] is not None
            if target == "cuda":
                assert 24 <= t["registers"] <= 255
                assert t["shared_bytes"] <= 227 * 1024
        text = _run(capsys, path, "--report", "--target", target)
        assert "tile sizes" in text and "block" in text and "regs" in text and "occ" in text
        assert ("cuBLASLt" in text) == (target == "cuda")


def test_gpu_tile_policy_per_kernel_kind():
    h200 = cost_model.H200
    # a row kernel: one row per block, the reduced dim whole
    assert cost_model.gpu_tile_sizes([64, 512], ["parallel", "reduction"], 4, {0}, "row",
                                     h200) == [1, 0]
    # elementwise: 256 threads x 16 bytes = 1024 fp32 values, innermost dims first
    assert cost_model.gpu_tile_sizes([64, 4096], ["parallel", "parallel"], 4, {0, 1},
                                     "elementwise", h200) == [1, 1024]
    assert cost_model.gpu_tile_sizes([64, 128], ["parallel", "parallel"], 4, {0, 1},
                                     "elementwise", h200) == [8, 0]
    # bf16: two 16-byte chunks per thread, 4096 values; a dim no divisor of which lies in
    # [512, 1024] points: whole rows when small, else a partial tile (built untiled)
    assert cost_model.gpu_tile_sizes([64, 8192], ["parallel", "parallel"], 2, {0, 1},
                                     "elementwise", h200) == [1, 4096]
    assert cost_model.gpu_tile_sizes([4, 1031], ["parallel", "parallel"], 4, {0, 1},
                                     "elementwise", h200) == [1, 0]
    assert cost_model.gpu_tile_sizes([1, 1000003], ["parallel", "parallel"], 4, {0, 1},
                                     "elementwise", h200) == [1, 1024]
    # a broadcast (row) kernel keeps its last dim whole
    assert cost_model.gpu_tile_sizes([64, 1000], ["parallel", "parallel"], 4, {0, 1},
                                     "row", h200) == [1, 0]
    # an inner dim that may not be split counts towards the tile
    assert cost_model.gpu_tile_sizes([64, 512], ["parallel", "parallel"], 4, {0},
                                     "elementwise", h200) == [2, 0]
    # a batched contraction: 128 x 128 output tiles, the batch loop one at a time, K inside
    assert cost_model.gpu_tile_sizes([8, 512, 512, 64], ["parallel"] * 3 + ["reduction"], 2,
                                     {0, 1, 2}, "contraction", h200) == [1, 128, 128, 0]


def test_tile_rows_limit_shrinks_inner_split_dims_first():
    assert limit_tile_rows([4, 0], 3) == [3, 0]
    assert limit_tile_rows([2, 8, 0], 4) == [2, 2, 0]
    assert limit_tile_rows([1, 1, 0], 1) == [1, 1, 0]
    assert limit_tile_rows([16, 4], 2) == [2, 1]


def test_input_fusion_pays_only_for_large_inputs():
    # a second read of 64 MB on the H200 costs 16 us, four launches: worth sharing
    assert cost_model.input_reread_pays(64 << 20, cost_model.H200)
    # 64 KB: 0.015 us, far below one launch
    assert not cost_model.input_reread_pays(64 << 10, cost_model.H200)
    estimate = cost_model.input_fusion_estimate(
        [(64 << 20, 1 << 24, False), ((64 << 20) + (16 << 10), 1 << 24, False)],
        (64 << 20) + (16 << 10), cost_model.H200)
    assert estimate.pays and estimate.bytes_unfused - estimate.bytes_fused == 64 << 20


def _input_fusion_case(index: int) -> str:
    path = os.path.join(os.path.dirname(__file__), "..", "passes", "fusion-input.mlir")
    with open(path) as f:
        return f.read().split("// -----")[index]


def test_input_groups_compile_on_both_backends(tmp_path):
    """The `input` kernel (a row sum and a max of exp over one 64 MB input) is, from the
    H200's plan, one fast-path CUDA kernel (PTX) and, from the CPU's plan, one correct CPU
    kernel whose tile loop runs both reductions."""
    import numpy as np
    from mlir import ir

    import fusec.runtime as runtime
    from fusec.compiler.targets import cuda as codegen_cuda
    from fusec.compiler.pipeline import CompileOptions, build_so, run_stage
    from fusec.dialects import make_context
    from fusec.passes import run_pipeline

    fusion = ["fusion-materialize-outputs", "fusion-plan{device=nvidia-h200}",
              "fusion-form-singletons", "canonicalize", "cse"]
    with make_context():
        module = ir.Module.parse(_input_fusion_case(1))
        run_pipeline(module, fusion)
        assert str(module).count("fusion.group input") == 1
        assert str(module).count("fusion.group ") == 1
        program = codegen_cuda.generate(module, codegen_cuda.CudaOptions(cubin=False))
        (launch,) = program.plan.launches
        assert launch.info["path"] == "fast" and launch.grid == 4096
        assert ".entry" in program.ptx
        # The CPU description plans the same kernel; its tiles run both roots, one loop.
        module = ir.Module.parse(_input_fusion_case(1))
        run_pipeline(module, [p.replace("nvidia-h200", "cpu") for p in fusion])
        assert str(module).count("fusion.group input") == 1
        options = CompileOptions(target="cpu", model_name="input")
        run_stage(module, "tiled", options)
        text = str(module)
        assert text.count("scf.forall (") == 1 and "fusion.grid = 1 :" not in text
        for stage in ("bufferized", "cpu"):
            run_stage(module, stage, options)
        build_so(module, options, str(tmp_path / "input.so"))
    compiled = runtime.load(str(tmp_path / "input.so"))
    assert len(compiled.kernels) == 1
    x = np.random.default_rng().standard_normal((4096, 4096)).astype(np.float32)
    total, peak = compiled(x)
    x64 = x.astype(np.float64)
    for out, ref in ((total, x64.sum(1)), (peak, np.exp(x64).max(1))):
        assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-5


def test_report_shows_a_capacity_split(capsys, tmp_path):
    """A softmax tail over rows of 65536 fp32 (a row's 64 values per thread over 1024 threads:
    about 96 registers per thread, more than an SM holds for one block): the tiled stage
    splits the group and the report says so, per kernel, with the reason."""
    path = os.path.join(os.path.dirname(__file__), "..", "passes", "fusion-capacity-fit.mlir")
    with open(path) as f:
        text = f.read().split("// -----")[0]
    model = tmp_path / "row.mlir"
    model.write_text(text)
    out = _run(capsys, str(model), "--report", "--target", "cuda")
    assert "fusion plan for nvidia-h200: 1 kernel" in out
    assert "tiling (tiled stage): 3 kernels (the fusion stage's 1 split for the device" in out
    assert out.count("split: registers per block: about 98304 > 65536 per SM") == 3
    data = json.loads(_run(capsys, str(model), "--report=json", "--target", "cuda"))
    assert [t["split"] is not None for t in data["tiled_kernels"]] == [True] * 3
    assert all(t["shared_bytes"] < 48 * 1024 for t in data["tiled_kernels"])
    # On the CPU the same row fits a core's L2: one kernel, nothing split.
    data = json.loads(_run(capsys, str(model), "--report=json", "--target", "cpu"))
    assert len(data["tiled_kernels"]) == 1 and data["tiled_kernels"][0]["split"] is None


def test_report_lists_the_kernels_built_and_the_fallback(capsys, tmp_path):
    """`--report -o` for target cuda ends with what each launch is as built: the CNN's
    im2col and epilogue are data-movement kernels and its convolution a cuBLASLt call,
    none on the fallback; with the family off, the transformer's head-merge transpose is a
    fallback kernel, listed with the emitters' refusal."""
    out = _run(capsys, os.path.join(EXAMPLES, "cnn", "model.mlir"), "--report", "--target",
               "cuda", "-o", str(tmp_path / "cnn.so"))
    built = out.split("kernels built (")[1]
    assert built.startswith("4):") and "movement  direct" in built and "gemm" in built
    assert "none on the fallback path" in built
    out = _run(capsys, os.path.join(EXAMPLES, "transformer", "model.mlir"), "--report",
               "--target", "cuda", "--no-cuda-movement", "-o", str(tmp_path / "t.so"))
    built = out.split("kernels built (")[1]
    assert "fallback" in built and "why: 'linalg.transpose' is not supported" in built
    assert "1 on the fallback path" in built
