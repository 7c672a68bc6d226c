#!/bin/bash
# One device call (the `device` tool's run, repo root, artifacts carried in .device-carry/cuda):
#   bash test/gpu/device_run.sh quick    tests + sanitizer + the matmul / transformer rows
#                                        + the input-fusion kernel (test/gpu/input_fusion.py)
#                                        + the tensor-core GEMM family (test/gpu/tc_gemm.py,
#                                        bench/tc_gemm.py) where built
#   bash test/gpu/device_run.sh full     tests + sanitizer + the whole benchmark (max-autotune)
set -o pipefail
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/fusec && export PYTHONPATH=/tmp/pkg
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
mode=${1:-quick}
date -u
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
python3 -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -1
python3 -m pytest -q -rfEs test/gpu 2>&1 | tee "$OUT/pytest.log" | tail -25
compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/sanitize_examples.py \
    .device-carry/cuda attention cnn elementwise gpt2_block layernorm_mlp mlp rmsnorm softmax \
    transformer 2>&1 | tee "$OUT/sanitizer.log" | tail -12
compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/sanitize_one.py \
    .device-carry/cuda 2>&1 | tee "$OUT/sanitizer_one.log" | tail -14
python3 test/gpu/input_fusion.py run .device-carry/cuda 2>&1 | tee "$OUT/input_fusion.log" | tail -4
# The tensor-core GEMM family (test/gpu/tc_gemm.py build): numerics and time through the
# pipeline, the sanitizers on the small cases, the kernel alone against torch.mm.
if [ -d .device-carry/cuda/tc ]; then
  python3 test/gpu/tc_gemm.py run .device-carry/cuda 2>&1 | tee "$OUT/tc_gemm.log" | tail -12
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/tc_gemm.py check \
      .device-carry/cuda ragged_relu_f16 kn_scale_shift attn_out_residual 2>&1 \
      | tee "$OUT/tc_memcheck.log" | tail -4
  compute-sanitizer --tool racecheck --error-exitcode 9 python3 test/gpu/tc_gemm.py check \
      .device-carry/cuda ragged_relu_f16 kn_scale_shift 2>&1 | tee "$OUT/tc_racecheck.log" \
      | tail -4
fi
# The data-movement family (test/gpu/movement.py build, test/gpu/fuzz_movement.py build).
if [ -d .device-carry/cuda/mv ]; then
  python3 test/gpu/movement.py run .device-carry/cuda 2>&1 | tee "$OUT/movement.log" | tail -20
fi
if [ -d .device-carry/cuda/mvfz ]; then
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/fuzz_movement.py run \
      .device-carry/cuda 2>&1 | tee "$OUT/movement_fuzz.log" | tail -4
fi
if [ -d .device-carry/cuda/tcraw ]; then
  python3 bench/tc_gemm.py run .device-carry/cuda/tcraw 2>&1 | tee "$OUT/tc_raw.log" | tail -8
fi
if [ "$mode" = quick ]; then
  python3 bench/gpu.py run .device-carry/cuda "$OUT" --only linear_gelu linear_gelu_bf16 \
      transformer_b1 --reps 50 2>&1 | grep -v Warning | tee "$OUT/bench.log" | tail -12
else
  timeout 420 python3 bench/gpu.py run .device-carry/cuda "$OUT" --reps 50 --max-autotune \
      --only transformer_b1 linear_gelu linear_gelu_bf16 ew ln rms softmax ew_bf16 ln_bf16 \
      rms_bf16 softmax_bf16 2>&1 | grep -v Warning | tee "$OUT/bench.log" | tail -22
fi
date -u
