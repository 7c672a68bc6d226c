"""Programmatic dependent launch (compiler/targets/cuda/dependent_launch.py), built here without
a GPU (the overlap and the numerics on the GPU: test/gpu/dependent_launch.py): every kernel of
every family waits for the kernel before it before it touches global memory, the runtime is
told to launch with the attribute, and neither happens where it must not (the option off, a
chip before Hopper)."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from fusec.compiler import driver  # noqa: E402
from fusec.compiler.frontend import import_torch  # noqa: E402
from fusec.compiler.targets.cuda.artifact import host_code  # noqa: E402
from fusec.compiler.targets.cuda.dependent_launch import supports_dependent_launch  # noqa: E402
from fusec.compiler.targets.cuda.options import CudaOptions  # noqa: E402

# The first instruction of a kernel that reads or writes global memory (TMA included).
GLOBAL_ACCESS = re.compile(r"\b(ld|st|atom|red)\.global|cp\.async\.bulk|cp\.async\.")


class Block(torch.nn.Module):
    """A LayerNorm, a Linear on our tensor-core GEMM with GELU after it, a softmax and a
    transpose: kernels of several families, each reading what the one before wrote."""

    def __init__(self, d: int = 256):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        h = F.gelu(self.fc(self.norm(x)))
        return torch.softmax(h, dim=-1).transpose(0, 1).contiguous() + 1.0


def _entries(ptx: str) -> dict[str, str]:
    """Each kernel's body in the PTX, by name."""
    parts = re.split(r"\.entry (\w+)\(", ptx)[1:]
    return dict(zip(parts[::2], parts[1::2]))


def _program(dtype=torch.bfloat16, **cuda):
    from fusec.compiler import pipeline as pl
    from fusec.compiler.targets import cuda as cg

    x = torch.randn(200, 256).to(dtype)
    model = Block().to(dtype).eval()
    with driver.quiet_torch_logs():
        text = import_torch(model, x)
    module = driver.parse(text, "<test>")
    pl.lower(module, pl.CompileOptions(target="cuda"), stop_after="tiled")
    return cg.generate(module, CudaOptions(cubin=False, **cuda))


@pytest.mark.parametrize("placement", ["at-exit", "after-wait", "at-start", "implicit"])
def test_every_kernel_waits_for_the_one_before_it_first(placement):
    program = _program(dependent_launch=placement)
    kernels = _entries(program.ptx)
    assert len(kernels) >= 3, kernels.keys()
    for name, body in kernels.items():
        wait = body.find("griddepcontrol.wait;")
        first = GLOBAL_ACCESS.search(body)
        assert 0 <= wait, name
        assert first is not None and wait < first.start(), (name, body[:wait])
        assert body.count("griddepcontrol.wait;") == 1, name
        # The trigger, where the placement puts it: the instructions in order, with `ret`.
        seq = re.findall(r"griddepcontrol\.\w+|\bret;", body)
        rets = seq.count("ret;")
        expected = {
            "at-exit": ["griddepcontrol.wait"] + ["griddepcontrol.launch_dependents",
                                                  "ret;"] * rets,
            "after-wait": ["griddepcontrol.wait", "griddepcontrol.launch_dependents"]
            + ["ret;"] * rets,
            "at-start": ["griddepcontrol.launch_dependents", "griddepcontrol.wait"]
            + ["ret;"] * rets,
            "implicit": ["griddepcontrol.wait"] + ["ret;"] * rets}[placement]
        assert rets >= 1 and seq == expected, (name, seq)
    assert program.plan.metadata["dependent_launch"] == placement
    # The runtime's table says to launch with the attribute: the program's last field.
    assert re.search(r"fusec_index_messages, \d+,\n  1,\n};", host_code(program))


def test_the_tensor_core_families_wait_too():
    """Our GEMM (TMA, wgmma, warp-specialised) is among the kernels, and waits before its
    first TMA load."""
    program = _program(dependent_launch="at-exit")
    gemm = [name for name, body in _entries(program.ptx).items() if "wgmma" in body]
    assert gemm, "the Linear did not go to our tensor-core GEMM"
    for name in gemm:
        body = _entries(program.ptx)[name]
        assert 0 <= body.find("griddepcontrol.wait;") < body.find("cp.async.bulk.tensor"), name


def test_no_dependent_launch_when_turned_off_or_before_hopper():
    off = _program(dependent_launch="off")
    assert "griddepcontrol" not in off.ptx
    assert "dependent_launch" not in off.plan.metadata
    assert re.search(r"fusec_index_messages, \d+,\n  0,\n};", host_code(off))
    ampere = _program(dtype=torch.float32, arch="sm_80")
    assert ampere.ptx and "griddepcontrol" not in ampere.ptx
    assert "dependent_launch" not in ampere.plan.metadata


@pytest.mark.parametrize("arch, expected", [("sm_90", True), ("sm_90a", True),
                                            ("sm_100a", True), ("sm_80", False),
                                            ("sm_89", False)])
def test_which_chips_have_it(arch, expected):
    assert supports_dependent_launch(arch) is expected


def test_an_unknown_placement_is_refused():
    from fusec.compiler.diagnostics import FusecError

    with pytest.raises(FusecError, match="--cuda-dependent-launch: 'early' is not one of "
                                         "implicit, at-exit, after-wait, at-start, off"):
        CudaOptions(dependent_launch="early")
