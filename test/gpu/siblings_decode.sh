#!/bin/bash
# Sibling GEMMs at decode-sized M: the fuzzer's sibling programs with a quarter of
# decode-sized shapes (few rows, K up to 4096), plain and under memcheck, then the q, k, v
# workloads of bench/gpu.py merged and apart beside eager and Inductor (one device call,
# about 3 minutes; carry .device-carry/sib2, .device-carry/qkv). At decode sizes each
# projection is cuBLASLt's and gemm_siblings.py merges only our GEMMs: the decode
# workloads differ only with its candidates extended to cuBLASLt's groups (bench/NOTES.md,
# session 56); the prefill ones (ours each) compare merged and apart as they are.
# Built here by:
#   python test/gpu/fuzz_tc_gemm.py build .device-carry/sib2 --siblings --examples 40 --seed 59
#   python bench/gpu.py build .device-carry/qkv --only qkv_decode1_bf16 \
#     qkv_decode1_bf16_apart qkv_decode_bf16 qkv_decode_bf16_apart qkv_prefill_bf16 \
#     qkv_prefill_bf16_apart
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT /tmp/pp && ln -sfn $PWD /tmp/pp/fusec; export PYTHONPATH=/tmp/pp
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
D=.device-carry/sib2
timeout 100 python3 test/gpu/fuzz_tc_gemm.py run $D --siblings > $OUT/sib2.log 2>&1
echo "siblings rc $?"; grep MISMATCH -A3 $OUT/sib2.log | head -n 12; tail -n 1 $OUT/sib2.log
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D --siblings > $OUT/sib2-mem.log 2>&1
echo "memcheck rc $?"; grep -m 3 "ERROR SUMMARY" $OUT/sib2-mem.log; tail -n 1 $OUT/sib2-mem.log
timeout 250 python3 bench/gpu.py run .device-carry/qkv $OUT --only qkv_decode1_bf16 qkv_decode1_bf16_apart qkv_decode_bf16 qkv_decode_bf16_apart qkv_prefill_bf16 qkv_prefill_bf16_apart > $OUT/qkv.log 2>&1
echo "bench rc $?"; grep -E "^qkv" $OUT/qkv.log | sed -e 's/; kernels.*//'
