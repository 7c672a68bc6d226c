#!/bin/bash
# Everything the first device call of a session runs (test/gpu/first_call.sh), built here
# (no GPU needed; about 6 minutes on 2 cores): .device-carry/cuda and .device-carry/mz, under
# the device tool's 64 MiB carry limit (about 52 MiB at session 47).
set -e
PY=${PY:-.venv/bin/python}
D=.device-carry/cuda
mkdir -p $D .device-carry/mz
$PY bench/gpu.py build $D
$PY test/gpu/build_examples.py $D
$PY test/gpu/input_fusion.py build $D
$PY test/gpu/tc_gemm.py build $D
$PY test/gpu/runtime_contract.py build $D
$PY test/gpu/movement.py build $D
$PY test/gpu/arg_reductions.py build $D
$PY test/gpu/fuzz_movement.py build $D
$PY test/gpu/attention.py build $D
$PY test/gpu/model_zoo.py build .device-carry/mz --fused gpt2 gpt2_sdpa bert llama vit \
    t5_encoder whisper_encoder resnet50 resnext50 mobilenet_v2 mobilenet_v3_small top2_moe \
    causal_mask positions topk_router index_payloads rotate_half inverted_residual resnet_basic
# The persistent GEMM schedules' fuzz programs (test/gpu/persistent_call.sh: its own call).
$PY test/gpu/fuzz_tc_gemm.py build .device-carry/pp --examples 60 --seed 53 --schedule ping-pong
$PY test/gpu/fuzz_tc_gemm.py build .device-carry/pp/few --examples 4 --seed 530 --schedule ping-pong
$PY test/gpu/fuzz_tc_gemm.py build .device-carry/co --examples 40 --seed 54 --schedule cooperative
$PY test/gpu/fuzz_tc_gemm.py build .device-carry/co/few --examples 4 --seed 540 --schedule cooperative
du -sh $D .device-carry/mz .device-carry/pp .device-carry/co
