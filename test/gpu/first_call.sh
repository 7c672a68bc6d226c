#!/bin/bash
# A session's first device call (LIMIT seconds, default 480; built by test/gpu/build_all.sh,
# carry .device-carry/cuda and .device-carry/mz): the staged transpose / joint fold
# (built on), the runtime contract, attention, the zoo, then the GPU test suite.
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT /tmp/pp && ln -sfn $PWD /tmp/pp/fusec; export PYTHONPATH=/tmp/pp
export PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( ${LIMIT:-480} - ($(date +%s) - T0) )); }
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 60 python3 test/gpu/runtime_contract.py run .device-carry/cuda > $OUT/rt.log 2>&1; echo "rt rc $?"; tail -n 12 $OUT/rt.log
timeout 50 python3 test/gpu/arg_reductions.py run .device-carry/cuda > $OUT/arg.log 2>&1; echo "arg rc $? ok $(grep -c '"ok": true' $OUT/arg.log) of $(grep -c '"ms"' $OUT/arg.log)"
grep '"ms"' $OUT/arg.log | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d['name'], d['ok'], d['paths'], d['ms'], d['vs_best_of_eager_inductor'])"
timeout 100 python3 test/gpu/movement.py run .device-carry/cuda transpose_add_f32 transpose_add_bf16 transpose_add_ragged permute_residual transpose_bias_mul transpose_slice_add two_transposes_add self_transpose_add transpose_8192 transpose_ragged k_transpose groupnorm_silu llama_block gpt2_block > $OUT/movement.log 2>&1; echo "movement rc $?"
grep '"ms"' $OUT/movement.log | python3 -c "
import json,sys
for l in sys.stdin:
    d=json.loads(l); print(d['name'], d['ok'], '%.1e' % d['err'], d['ms'], d['vs_best_of_eager_inductor'], d.get('floor_fraction'), d.get('shapes'))"
echo "t $(( $(date +%s) - T0 ))"
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 9 python3 test/gpu/movement.py check .device-carry/cuda transpose_add_ragged two_transposes_add self_transpose_add permute_residual > $OUT/race.log 2>&1; echo "race rc $?"; tail -n 1 $OUT/race.log
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/arg_reductions.py check .device-carry/cuda seg_argmax_c21_f32 seg_argmax_c150_bf16 col_max_f32 > $OUT/argmem.log 2>&1; echo "argmem rc $?"; tail -n 1 $OUT/argmem.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 test/gpu/fuzz_movement.py run .device-carry/cuda > $OUT/fuzz.log 2>&1; echo "fuzz rc $?"; tail -n 2 $OUT/fuzz.log
echo "t $(( $(date +%s) - T0 ))"
timeout 80 python3 test/gpu/attention.py run .device-carry/cuda > $OUT/att.log 2>&1; echo "att rc $?"; grep '"ms"' $OUT/att.log | cut -c1-240
echo "t $(( $(date +%s) - T0 ))"
timeout 130 python3 test/gpu/model_zoo.py run .device-carry/mz > $OUT/mz.log 2>&1; echo "mz rc $?"; cut -c1-150 $OUT/mz.log
L=$(left); echo "left $L"
if [ $L -gt 60 ]; then timeout $L python3 -m pytest -q -rfEs test/gpu > $OUT/pytest.log 2>&1; echo "pytest rc $?"; tail -n 8 $OUT/pytest.log; fi
echo "elapsed $(( $(date +%s) - T0 ))"
