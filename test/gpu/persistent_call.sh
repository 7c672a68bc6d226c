#!/bin/bash
# The persistent GEMM schedules' checks on the GPU (one device call, about 4 minutes): the
# GEMM fuzzer's programs built with `--cuda-gemm-schedule ping-pong` and `cooperative`
# (every matmul our GEMM takes on that schedule; built by test/gpu/build_all.sh into
# .device-carry/pp and .device-carry/co, carry both), plain, then under memcheck; a few
# under racecheck and synccheck.
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT /tmp/pp && ln -sfn $PWD /tmp/pp/fusec; export PYTHONPATH=/tmp/pp
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
for s in ping-pong cooperative; do
  D=.device-carry/$([ $s = ping-pong ] && echo pp || echo co)
  timeout 120 python3 test/gpu/fuzz_tc_gemm.py run $D --schedule $s > $OUT/$s.log 2>&1
  echo "$s fuzz rc $?"; tail -n 1 $OUT/$s.log
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D --schedule $s > $OUT/$s-mem.log 2>&1
  echo "$s memcheck rc $?"; tail -n 2 $OUT/$s-mem.log
  for tool in racecheck synccheck; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D/few --schedule $s > $OUT/$s-$tool.log 2>&1
    echo "$s $tool rc $?"; grep -E "Race reported|Error:" $OUT/$s-$tool.log | sort | uniq -c | head -n 5; tail -n 2 $OUT/$s-$tool.log
  done
done
