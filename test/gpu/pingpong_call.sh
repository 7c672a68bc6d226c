#!/bin/bash
# The ping-pong GEMM schedule's checks on the GPU (one device call, about 3 minutes): the
# GEMM fuzzer's programs built with `--cuda-gemm-schedule ping-pong` (every matmul our GEMM
# takes on that schedule; built by test/gpu/build_all.sh into .device-carry/pp, carry it),
# plain, then under memcheck; a few under racecheck and synccheck.
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT /tmp/pp && ln -sfn $PWD /tmp/pp/fusec; export PYTHONPATH=/tmp/pp
export PYTHONUNBUFFERED=1
D=.device-carry/pp
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 test/gpu/fuzz_tc_gemm.py run $D --schedule ping-pong > $OUT/ppfz.log 2>&1
echo "fuzz rc $?"; grep -c MISMATCH $OUT/ppfz.log; tail -n 1 $OUT/ppfz.log
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D --schedule ping-pong > $OUT/ppmem.log 2>&1
echo "memcheck rc $?"; tail -n 2 $OUT/ppmem.log
for tool in racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python3 test/gpu/fuzz_tc_gemm.py run $D/few --schedule ping-pong > $OUT/pp$tool.log 2>&1
  echo "$tool rc $?"; tail -n 2 $OUT/pp$tool.log
done
