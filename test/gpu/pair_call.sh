#!/bin/bash
# Our tensor-core GEMM pairs on the GPU (one device call, about 6 minutes; carry
# .device-carry/pairs and .device-carry/pairs_apart). Built here by:
#   for s in model ping-pong cooperative one-warpgroup; do
#     python test/gpu/fuzz_tc_gemm.py build .device-carry/pairs --pairs --schedule $s ...
#     python test/gpu/fuzz_tc_gemm.py build .device-carry/pairs/few --pairs --schedule $s ...
#   done
#   python bench/gpu.py build .device-carry/pairs/bench --only swiglu_bf16 swiglu_bf16_apart \
#     swiglu_llama_bf16 swiglu_llama_bf16_apart
#   python test/gpu/movement.py build .device-carry/pairs llama_block   (and, with
#     gemm_pair off, into .device-carry/pairs_apart: the same block, its two GEMMs apart)
# The fuzzer's pair programs (two matmuls of one input joined elementwise) on each schedule,
# plain, then under memcheck; a few under racecheck and synccheck; then the SwiGLU workloads
# beside eager and Inductor, and the LLaMA block paired and apart.
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT /tmp/pp && ln -sfn $PWD /tmp/pp/fusec; export PYTHONPATH=/tmp/pp
export PYTHONUNBUFFERED=1
D=.device-carry/pairs
nvidia-smi --query-gpu=name --format=csv,noheader
for s in model ping-pong cooperative one-warpgroup; do
  timeout 100 python3 test/gpu/fuzz_tc_gemm.py run $D --schedule $s --pairs > $OUT/pair-$s.log 2>&1
  echo "$s pairs rc $?"; grep MISMATCH -A3 $OUT/pair-$s.log | head -n 12; tail -n 1 $OUT/pair-$s.log
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D --schedule $s --pairs > $OUT/pair-$s-mem.log 2>&1
  echo "$s memcheck rc $?"; tail -n 2 $OUT/pair-$s-mem.log
done
for s in ping-pong cooperative; do
  for tool in racecheck synccheck; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D/few --schedule $s --pairs > $OUT/pair-$s-$tool.log 2>&1
    echo "$s $tool rc $?"; grep -E "Race reported|Error:" $OUT/pair-$s-$tool.log | sort | uniq -c | head -n 5; tail -n 1 $OUT/pair-$s-$tool.log
  done
done
timeout 150 python3 bench/gpu.py run $D/bench $OUT --only swiglu_bf16 swiglu_bf16_apart swiglu_llama_bf16 swiglu_llama_bf16_apart > $OUT/bench.log 2>&1
echo "bench rc $?"; tail -n 7 $OUT/bench.log
for d in pairs pairs_apart; do
  timeout 90 python3 test/gpu/movement.py run .device-carry/$d llama_block > $OUT/llama-$d.log 2>&1
  echo "llama $d rc $?"; tail -n 6 $OUT/llama-$d.log
done
