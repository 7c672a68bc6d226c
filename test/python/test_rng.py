"""Model state across runs: ml_program globals (torch-mlir's RNG seed) kept by the artifact.

--fusion-globals-to-state makes each global an input and an output of the model; the artifact
keeps their bytes in its own storage, initialised from the global's value, and the caller
never sees them (compiler/artifact.py). A counter checks the mechanism exactly; torch's
random ops check it the way torch-mlir's e2e suite does: statistics over many samples, and
fresh values on every call.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import fusec
from fusec.compiler.artifact import PlanError, generate_host_code, validate_plan
from fusec.runtime.plan import Buffer, Launch, Plan, State

COUNTER = """
ml_program.global private mutable @counter(dense<[5, -3]> : tensor<2xi64>) : tensor<2xi64>
func.func @main(%x: tensor<2xi64>) -> (tensor<2xi64>, tensor<2xi64>) {
  %c = ml_program.global_load @counter : tensor<2xi64>
  %e = tensor.empty() : tensor<2xi64>
  %n = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                        affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%c, %x : tensor<2xi64>, tensor<2xi64>) outs(%e : tensor<2xi64>) {
  ^bb0(%a: i64, %b: i64, %o: i64):
    %s = arith.addi %a, %b : i64
    linalg.yield %s : i64
  } -> tensor<2xi64>
  ml_program.global_store @counter = %n : tensor<2xi64>
  return %c, %n : tensor<2xi64>, tensor<2xi64>
}
"""


def test_global_persists_across_runs_from_its_initial_value():
    model = fusec.compile(COUNTER, cache=False)
    # The state is the artifact's own: one input, two outputs, one state in the metadata.
    assert [s.shape for s in model.signature.inputs] == [(2,)]
    assert len(model.signature.outputs) == 2
    assert [s["name"] for s in model.metadata["states"]] == ["counter"]
    rng = np.random.default_rng(0)
    expected = np.array([5, -3], np.int64)
    for _ in range(4):
        x = rng.integers(-100, 100, 2).astype(np.int64)
        old, new = model(x)
        np.testing.assert_array_equal(old, expected)
        np.testing.assert_array_equal(new, expected + x)
        expected = expected + x


def test_a_new_artifact_starts_from_the_initial_value_again():
    first = fusec.compile(COUNTER, cache=False)
    first(np.array([1, 1], np.int64))
    second = fusec.compile(COUNTER, cache=False)
    old, _ = second(np.array([1, 1], np.int64))
    np.testing.assert_array_equal(old, [5, -3])


def _state_plan(init: str, output_shape: list[int]) -> Plan:
    buffers = [Buffer(0, "input", "input0", [2], "int64"),
               Buffer(1, "input", "input1", [2], "int64"),
               Buffer(2, "output", "output0", output_shape, "int64")]
    launch = Launch("k", [0, 1, 2], 1)
    return Plan("cpu", buffers, [launch], [0, 1], [2], states=[State("seed", 1, 0, init)])


def test_plan_states_are_checked_and_survive_json():
    plan = _state_plan("00" * 16, [2])
    validate_plan(plan)
    again = Plan.from_json_dict(json.loads(json.dumps(plan.to_json_dict())))
    assert again.states == plan.states and again.user_inputs() == [0] and again.user_outputs() == []
    with pytest.raises(PlanError, match="init has 8 bytes, the buffer 16"):
        validate_plan(_state_plan("00" * 8, [2]))
    with pytest.raises(PlanError, match="its output is int64\\[3\\]"):
        validate_plan(_state_plan("00" * 16, [3]))
    # The caller's tables hold the other input only; the state is static storage.
    code = generate_host_code(plan)
    assert "const int fusec_plan_num_inputs = 1;" in code
    assert "void *inputs[] = {user_inputs[0], fusec_state0};" in code
    assert "memcpy(fusec_state0, fusec_state0_next, 16);" in code


torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")


class Rand(torch.nn.Module):
    def forward(self, x):
        return torch.rand_like(x)


class Randn(torch.nn.Module):
    def forward(self, x):
        return torch.randn(x.shape, dtype=torch.float32)


class Dropout(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x, 0.3, training=True)


SHAPE = (256, 512)


def _compile(module: torch.nn.Module):
    return fusec.compile(module, torch.rand(SHAPE) + 0.5, cache=False)


def test_rand_is_uniform_and_fresh_on_every_call():
    model = _compile(Rand())
    x = np.random.default_rng(1).random(SHAPE, np.float32)
    a, b = model(x), model(x)
    for out in (a, b):
        assert out.dtype == np.float32 and out.shape == SHAPE
        assert out.min() >= 0.0 and out.max() < 1.0
        # 131072 samples: the mean's standard error is 0.0008, the std's about 0.0005.
        assert abs(out.mean() - 0.5) < 0.01
        assert abs(out.std() - (1 / 12) ** 0.5) < 0.01
    assert np.mean(a != b) > 0.99
    # Consecutive calls are not correlated element by element.
    assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.02


def test_randn_is_standard_normal():
    model = _compile(Randn())
    x = np.random.default_rng(2).random(SHAPE, np.float32)
    a, b = model(x), model(x)
    for out in (a, b):
        assert abs(out.mean()) < 0.02 and abs(out.std() - 1.0) < 0.02
        assert abs(np.mean(np.abs(out) < 1.0) - 0.6827) < 0.01
    assert np.mean(a != b) > 0.99


def test_dropout_in_training_mode_drops_and_rescales():
    model = _compile(Dropout())
    x = np.random.default_rng(3).random(SHAPE, np.float32) + 0.5
    a, b = model(x), model(x)
    for out in (a, b):
        kept = out != 0
        assert abs(1 - kept.mean() - 0.3) < 0.01
        ref = x.astype(np.float64)[kept] / 0.7
        assert np.linalg.norm(out[kept] - ref) / np.linalg.norm(ref) < 1e-6
    assert np.mean((a != 0) != (b != 0)) > 0.3  # a fresh mask each call


class Multinomial(torch.nn.Module):
    def forward(self, p):
        return torch.multinomial(p, 40000, replacement=True)


def test_multinomial_loop_kernel_samples_the_distribution():
    """torch-mlir writes multinomial as loops in the model function (a serial kernel here,
    --fusion-form-loop-kernels) reading the seed it updates (a loop-free state access)."""
    p = np.array([0.1, 0.2, 0.3, 0.4], np.float64)
    model = fusec.compile(Multinomial(), torch.tensor(p), cache=False)
    # The two loops (cumulative sums; sampling) are one-tile kernels of their own.
    loops = [k for k in model.kernels if k["kind"] == "single" and not k["ops"]]
    assert len(loops) == 2 and all(k["grid"] == 1 for k in loops)
    a, b = model(p), model(p)
    for out in (a, b):
        assert out.shape == (40000,) and out.min() >= 0 and out.max() <= 3
        freq = np.bincount(out, minlength=4) / out.size
        # Standard error of each frequency is at most 0.0025.
        assert np.abs(freq - p).max() < 0.015
    assert np.mean(a != b) > 0.5
