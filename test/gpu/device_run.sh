#!/bin/bash
# One device call (the `device` tool's run, repo root, artifacts carried in .device-carry/cuda):
#   bash test/gpu/device_run.sh quick    tests + sanitizer + the matmul / transformer rows
#   bash test/gpu/device_run.sh full     tests + sanitizer + the whole benchmark (max-autotune)
set -o pipefail
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/fusec && export PYTHONPATH=/tmp/pkg
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
mode=${1:-quick}
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
python3 -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tail -1
grep -h libcublasLt /proc/self/maps 2>/dev/null | head -1
python3 -c "import torch, re; torch.randn(8, 8, device='cuda') @ torch.randn(8, 8, device='cuda'); print([l.split()[-1] for l in open('/proc/self/maps') if 'cublasLt' in l][:1])"
python3 -m pytest -q -rfEs test/gpu 2>&1 | tee "$OUT/pytest.log" | tail -45
compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/sanitize_examples.py \
    .device-carry/cuda mlp attention layernorm_mlp transformer gpt2_block cnn 2>&1 \
    | tee "$OUT/sanitizer.log" | tail -9
if [ "$mode" = quick ]; then
  python3 bench/gpu.py run .device-carry/cuda "$OUT" --only linear_gelu linear_gelu_bf16 \
      transformer_b1 --reps 30 2>&1 | grep -v Warning | tee "$OUT/bench.log" | tail -12
else
  timeout 420 python3 bench/gpu.py run .device-carry/cuda "$OUT" --reps 50 --max-autotune \
      --only transformer_b1 linear_gelu linear_gelu_bf16 ew ln rms softmax ew_bf16 ln_bf16 \
      rms_bf16 softmax_bf16 2>&1 | grep -v Warning | tee "$OUT/bench.log" | tail -22
fi
