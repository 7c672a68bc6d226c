"""The `cpu` stage over parts of the kernels side by side (compiler/targets/cpu/parts.py):
the module it gives is the serial stage's, op for op; a part that fails sends the whole
stage back to the serial run, which leaves nothing behind and raises as it always has."""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path

import pytest
from fusec.compiler import driver
from fusec.compiler.pipeline import CompileOptions, lower
from fusec.compiler.targets import cpu as codegen_cpu
from fusec.compiler.targets.cpu import parts
from fusec.passes import run_pipeline

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "transformer" / "model.mlir"


def _bufferized():
    module = driver.parse(EXAMPLE.read_text(), "transformer.mlir")
    lower(module, CompileOptions(fusion=False), stop_after="bufferized")
    return module


def _ops(module) -> list[str]:
    return sorted(op.operation.get_asm(print_generic_op_form=True, use_local_scope=True)
                  for op in module.body.operations)


def _leftovers() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "fusec-cpu-part-*")))


def _in_parts(module, cores, part_passes=None):
    with module.context:
        parts.run_in_parts(module, codegen_cpu.cpu_module_passes(),
                           part_passes or codegen_cpu.cpu_kernel_passes(partial=True),
                           codegen_cpu.cpu_passes(), run_pipeline, cores)


@pytest.fixture(scope="module")
def serial():
    module = _bufferized()
    with module.context:
        run_pipeline(module, codegen_cpu.cpu_passes())
    return _ops(module)


@pytest.mark.parametrize("cores", [2, 3])
def test_the_stage_in_parts_gives_the_serial_module(serial, cores, monkeypatch):
    monkeypatch.delenv("FUSEC_CPU_STAGE_PARTS", raising=False)
    module = _bufferized()
    with module.context:
        planned = module.operation.clone()
        run_pipeline(planned, codegen_cpu.cpu_module_passes())
        kernels = len(parts._kernels(planned))
    assert parts.part_count(kernels, cores) == cores  # it is cut: not the serial path
    before = _leftovers()

    def no_fallback(*_):
        raise AssertionError("the stage fell back to the serial run")

    monkeypatch.setattr(parts, "_replace_body", no_fallback)
    _in_parts(module, cores)
    assert _ops(module) == serial
    assert _leftovers() <= before


def test_a_failing_part_runs_the_stage_again_serially(serial):
    """Parts whose passes fail (here: a pass that does not exist) leave no trace: the stage
    runs again from the module as it came, serially, and gives the serial module."""
    module = _bufferized()
    before = _leftovers()
    _in_parts(module, 2, part_passes=["no-such-pass"])
    assert _ops(module) == serial
    assert _leftovers() <= before


def test_an_error_in_the_stage_is_the_serial_runs():
    """A stage that fails in its parts fails in the serial run too: the error raised is
    that run's (here: a pass that does not exist, at the end of both lists), and no
    child's file is left."""
    module = _bufferized()
    before = _leftovers()
    with module.context, pytest.raises(ValueError, match="no-such-pass"):
        parts.run_in_parts(module, codegen_cpu.cpu_module_passes(),
                           codegen_cpu.cpu_kernel_passes(partial=True) + ["no-such-pass"],
                           codegen_cpu.cpu_passes() + ["no-such-pass"], run_pipeline, 2)
    assert _leftovers() <= before


def test_part_counts():
    assert parts.part_count(3, 8) == 1  # too few kernels to be worth a child
    assert parts.part_count(8, 2) == 2
    assert parts.part_count(100, 4) == 4
    assert parts.part_count(100, 1) == 1
    sizes = {"a": 10, "b": 9, "c": 5, "d": 4, "e": 1}
    cut = parts.balanced_parts(sizes, 2)
    assert sorted(sum(sizes[k] for k in p) for p in cut) == [14, 15]
    assert set().union(*cut) == set(sizes)


def test_the_env_variable_makes_it_serial(monkeypatch):
    monkeypatch.setenv("FUSEC_CPU_STAGE_PARTS", "1")
    assert parts.part_count(100, 8) == 1
