#!/bin/bash
# Sibling GEMMs (q, k and v projections of one input in one kernel) on the GPU: the
# fuzzer's sibling programs on each schedule, plain and under memcheck, a few under
# racecheck and synccheck (one device call, about 8 minutes; carry .device-carry/sib).
# Built here by:
#   for s in model ping-pong cooperative one-warpgroup; do
#     python test/gpu/fuzz_tc_gemm.py build .device-carry/sib --siblings --schedule $s ...
#     python test/gpu/fuzz_tc_gemm.py build .device-carry/sib/few --siblings --schedule $s \
#       --examples 3 ...
#   done
# The timing half (the zoo's transformers and the LLaMA block, siblings merged and apart):
# test/gpu/siblings_bench.sh.
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT /tmp/pp && ln -sfn $PWD /tmp/pp/fusec; export PYTHONPATH=/tmp/pp
export PYTHONUNBUFFERED=1
D=.device-carry/sib
nvidia-smi --query-gpu=name --format=csv,noheader
for s in model ping-pong cooperative one-warpgroup; do
  timeout 100 python3 test/gpu/fuzz_tc_gemm.py run $D --schedule $s --siblings > $OUT/sib-$s.log 2>&1
  echo "$s siblings rc $?"; grep MISMATCH -A3 $OUT/sib-$s.log | head -n 12; tail -n 1 $OUT/sib-$s.log
done
for s in model ping-pong cooperative one-warpgroup; do
  timeout 110 compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D --schedule $s --siblings > $OUT/sib-$s-mem.log 2>&1
  echo "$s memcheck rc $?"; grep -m 3 "Error\|ERROR SUMMARY" $OUT/sib-$s-mem.log; tail -n 1 $OUT/sib-$s-mem.log
done
for s in ping-pong cooperative model; do
  for tool in racecheck synccheck; do
    timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D/few --schedule $s --siblings > $OUT/sib-$s-$tool.log 2>&1
    echo "$s $tool rc $?"; grep -E "Race reported|Error:" $OUT/sib-$s-$tool.log | sort | uniq -c | head -n 5; tail -n 1 $OUT/sib-$s-$tool.log
  done
done
