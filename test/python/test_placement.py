"""Placement (`--fusion-place`), capacity checks (`--fusion-capacity`) and the tiled report.

The rules are pure functions of the cost model (checked here on plain numbers); the passes
are checked on fusion-stage IR and on the examples lowered through the CPU `tiled` stage.
Numerics with the attributes present are covered by test_examples_e2e.py and
test_codegen_cpu.py, whose CPU pipeline runs both passes.
"""

from __future__ import annotations

import os

import pytest
from fusec.dialects import make_context
from fusec.passes import cost_model, run_pipeline
from fusec.passes.inline_groups import groups_in
from fusec.passes.tiling.place import PLACEMENT_ATTR, placements
from fusec.passes.report import report_data
from mlir import ir

H200 = cost_model.H200
CPU = cost_model.CPU_HOST
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")

SOFTMAX = """
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @main(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
  %r = fusion.group reduction (%a = %x : tensor<64x256xf32>) -> tensor<64x256xf32> {
    %zero = arith.constant 0.0 : f32
    %e1 = tensor.empty() : tensor<64xf32>
    %e2 = tensor.empty() : tensor<64x256xf32>
    %exp = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
        ins(%a : tensor<64x256xf32>) outs(%e2 : tensor<64x256xf32>) {
    ^bb0(%in: f32, %out: f32):
      %t = math.exp %in : f32
      linalg.yield %t : f32
    } -> tensor<64x256xf32>
    %fs = linalg.fill ins(%zero : f32) outs(%e1 : tensor<64xf32>) -> tensor<64xf32>
    %s = linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
        ins(%exp : tensor<64x256xf32>) outs(%fs : tensor<64xf32>) {
    ^bb0(%in: f32, %acc: f32):
      %t = arith.addf %in, %acc : f32
      linalg.yield %t : f32
    } -> tensor<64xf32>
    %d = linalg.generic {indexing_maps = [#id, #row, #id],
                         iterator_types = ["parallel", "parallel"]}
        ins(%exp, %s : tensor<64x256xf32>, tensor<64xf32>) outs(%e2 : tensor<64x256xf32>) {
    ^bb0(%in: f32, %sum: f32, %out: f32):
      %q = arith.divf %in, %sum : f32
      linalg.yield %q : f32
    } -> tensor<64x256xf32>
    fusion.yield %d : tensor<64x256xf32>
  }
  return %r : tensor<64x256xf32>
}
"""


# --- the pure rules ---------------------------------------------------------------------------

def test_threads_and_registers() -> None:
    assert cost_model.tile_threads(4096, H200) == 256
    assert cost_model.tile_threads(40, H200) == 64  # whole warps for a small tile
    assert cost_model.tile_threads(4096, CPU) == 1
    # 8 rows of 512 f32 over 256 threads: 16 registers each; an f64 value needs twice that.
    assert cost_model.value_registers(8 * 512, 4, 256) == 16
    assert cost_model.value_registers(8 * 512, 8, 256) == 32
    assert cost_model.registers_per_thread(16) == cost_model.BASE_REGISTERS_PER_THREAD + 16


def test_sm_occupancy_limits() -> None:
    # 256 threads x 32 registers: 8 blocks by registers and by threads: full occupancy.
    assert cost_model.sm_occupancy(256, 32, 0, H200) == 1.0
    # 128 registers: 65536 / (128 * 256) = 2 blocks of 8 warps = 16 of 64 warps.
    assert cost_model.sm_occupancy(256, 128, 0, H200) == 0.25
    # 100 KB of shared memory per block: 2 blocks per SM (228 KB).
    assert cost_model.sm_occupancy(256, 32, 100 * 1024, H200) == 0.25
    assert cost_model.sm_occupancy(1, 0, 0, CPU) == 1.0


def test_check_tile_shared_memory_limits() -> None:
    fits = cost_model.check_tile(16 * 1024, 16, 256, H200)
    assert fits.over == () and fits.notes == ()
    opt_in = cost_model.check_tile(64 * 1024, 16, 256, H200)
    assert opt_in.over == () and "opt-in" in opt_in.notes[0]
    over = cost_model.check_tile(228 * 1024, 16, 256, H200)
    assert over.over and "shared memory per block" in over.over[0]
    assert cost_model.check_tile(227 * 1024, 16, 256, H200).over == () or \
        all(o.startswith("occupancy") for o in cost_model.check_tile(227 * 1024, 16, 256,
                                                                      H200).over)


def test_check_tile_registers_and_occupancy() -> None:
    over = cost_model.check_tile(0, 300, 256, H200)
    assert any("registers per thread" in o for o in over.over)
    # 160 registers: 65536 / (160 * 256) = 1 block of 256 threads: 0.125 < 0.25 wanted.
    slow = cost_model.check_tile(0, 160 - cost_model.BASE_REGISTERS_PER_THREAD, 256, H200)
    assert slow.over == ("occupancy 0.12 < 0.25 wanted",)
    # The CPU has no register limit; its on-chip level is a core's L2.
    assert cost_model.check_tile(0, 10_000, 1, CPU).over == ()
    assert cost_model.check_tile(2 * 1024 * 1024, 0, 1, CPU).over


def test_largest_fitting_share() -> None:
    # 8 rows of 32 KB: 7 fit in 227 KB.
    assert cost_model.largest_fitting_share(32 * 1024 + 4, 0, 8, H200) == 7
    # One row of 256 KB: none fits.
    assert cost_model.largest_fitting_share(256 * 1024, 0, 1, H200) == 0
    # Registers: 24 + 16 n <= 255 -> n <= 14.
    assert cost_model.largest_fitting_share(0, 16, 32, H200) == 14


# --- the passes on IR -------------------------------------------------------------------------

def _placed(text: str, device: str, tile: str = "fusion-tile{threads=4,min-tile-kb=1}"):
    module = ir.Module.parse(text)
    run_pipeline(module, [tile, "canonicalize", "cse", f"fusion-place{{device={device}}}",
                          f"fusion-capacity{{device={device}}}"])
    return module


def _levels(group: ir.Operation) -> dict[str, str]:
    """Op (by the first payload op it computes, or its name) -> its memory level."""
    levels = {}
    for op, level in placements(group):
        key = op.name
        if op.name == "linalg.generic":
            payload = [o.operation.name for o in op.regions[0].blocks[0].operations]
            key = payload[0] if payload[0] != "linalg.yield" else "fill"
        levels[key] = level
    return levels


def test_softmax_tail_placement_gpu_and_cpu() -> None:
    with make_context():
        module = _placed(SOFTMAX, "h200")  # held: the groups live in it
        group = groups_in(module.operation)[0]
        levels = _levels(group)
        # exp is read by the sum and by the division, each element where it was made: kept
        # in the registers of the thread that made it; the sum is broadcast over its row (every
        # thread reads it): shared; the division is the output.
        assert levels["math.exp"] == "register"
        assert levels["arith.addf"] == "shared"
        assert levels["arith.divf"] == "global"
        assert levels["fill"] == "register"
        summary = ir.DictAttr(group.attributes[PLACEMENT_ATTR])
        assert ir.IntegerAttr(summary["shared"]).value == 4 * 4  # the 4 rows' sums
        assert ir.IntegerAttr(summary["global"]).value == 64 * 256 * 4
        assert ir.StringAttr(group.attributes["fusion.capacity"]).value == "fits"

        cpu_module = _placed(SOFTMAX, "cpu")
        cpu_group = groups_in(cpu_module.operation)[0]
        cpu_levels = _levels(cpu_group)
        assert "shared" not in cpu_levels.values()
        assert cpu_levels["arith.divf"] == "global"
        cpu_summary = ir.DictAttr(cpu_group.attributes[PLACEMENT_ATTR])
        assert ir.IntegerAttr(cpu_summary["on_chip"]).value == 4 * 256 * 4 + 4 * 4


def test_row_too_long_is_refused_with_reason() -> None:
    long_rows = SOFTMAX.replace("64x256", "4x65536").replace("tensor<64xf32>", "tensor<4xf32>")
    with make_context():
        module = _placed(long_rows, "h200")
        group = groups_in(module.operation)[0]
        text = ir.StringAttr(group.attributes["fusion.capacity"]).value
        # 65536 fp32 of exp's row over 256 threads: 256 registers per thread for it alone.
        assert text.startswith("over: registers per thread: about 281 > 255")
        assert "the row spread over more threads, or a split into two kernels" in text


# --- the examples through the CPU tiled stage -------------------------------------------------

def _tiled_example(name: str):
    from fusec.compiler import driver
    from fusec.compiler.pipeline import CompileOptions, lower

    path = os.path.join(EXAMPLES, name, "model.py")
    source, _, _ = driver.load_input(path)
    module = driver.as_module(source, path)
    fusion = ir.Module.parse(str(module), module.context)
    lower(fusion, CompileOptions(target="cpu"), stop_after="fusion")
    lower(module, CompileOptions(target="cpu"), stop_after="tiled")
    return fusion, module


@pytest.mark.parametrize("name", ["softmax", "layernorm_mlp", "attention"])
def test_examples_every_tile_value_placed(name: str) -> None:
    fusion, tiled = _tiled_example(name)
    with tiled.context:
        groups = groups_in(tiled.operation)
        assert groups
        for group in groups:
            assert PLACEMENT_ATTR in group.attributes
            assert "fusion.capacity" in group.attributes
            levels = [level for _, level in placements(group)]
            assert "global" in levels  # every kernel writes its output
            assert "shared" not in levels  # the CPU description has no shared memory
            unplaced = []

            def visit(op: ir.Operation) -> ir.WalkResult:
                if op.name.startswith("linalg.") and op.name not in ("linalg.yield",
                                                                     "linalg.index"):
                    if op.parent is not None and op.parent.name in ("fusion.group",
                                                                    "scf.forall"):
                        if "fusion.mem" not in op.attributes:
                            unplaced.append(op.name)
                return ir.WalkResult.ADVANCE

            group.walk(visit)
            assert unplaced == []
        data = report_data(fusion, device="cpu", tiled=tiled)
        assert len(data["kernels"]) == len(groups)
        for kernel, group in zip(data["kernels"], groups):
            tiling = kernel["tiling"]
            assert tiling["grid"] == ir.IntegerAttr(group.attributes["fusion.grid"]).value
            assert tiling["capacity"] == ir.StringAttr(group.attributes["fusion.capacity"]).value
            assert sum(tiling["placements"].values()) == len(placements(group))
