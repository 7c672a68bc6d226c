#!/bin/bash
# The attention kernel's variants on the device (session 57: P in registers, warpgroups
# taking turns). Built here by:
#   ATTENTION_P_REGISTERS=0|1 ATTENTION_PINGPONG=0|1 [ATTENTION_TILE=bm,bn,s] \
#     python test/gpu/attention.py build .device-carry/at<X> [CASE ...]
#   [ATTENTION_WIDE=1] python test/gpu/fuzz_attention.py build .device-carry/fz<w|d> ...
# Carry the folders named: $CHECK (default atC) is built with every case, the others with
# the timed ones; $FUZZ (default "fzw fzd") are fuzz_attention.py builds, the first of them
# also run under the sanitizers; $AB (default below) the variants timed against each other.
export PYTHONPATH=/tmp/pp; mkdir -p /tmp/pp && ln -sfn "$PWD" /tmp/pp/fusec
C=.device-carry
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
CHECK=${CHECK:-atC}; FUZZ=${FUZZ:-fzw fzd}
AB=${AB:-A=$C/atA B=$C/atB C=$C/atC C64=$C/atC64 C3=$C/atC3 W=$C/atW}
timeout 150 python3 test/gpu/attention.py check $C/$CHECK > $OUT/checkC.log 2>&1
echo "check rc $? ok $(grep -c '"ok": true' $OUT/checkC.log) of $(grep -c '"name"' $OUT/checkC.log)"
for f in $FUZZ; do
  timeout 150 python3 test/gpu/fuzz_attention.py run $C/$f > $OUT/$f.log 2>&1
  echo "$f rc $?"; tail -n 1 $OUT/$f.log
done
timeout 240 python3 test/gpu/attention_ab.py $AB -- sdpa_s4096_d128 sdpa_causal_s4096_d128 gpt2_attention_t1024 sdpa_s4096_d64 sdpa_causal_s4096_d64 \
  sdpa_s2048_d128 sdpa_causal_s2048_d128 sdpa_s1024_d128 sdpa_causal_s1024_d128 \
  decode_b8_h32 bert_masked_s128 > $OUT/ab.log 2>&1
echo "ab rc $?"
python3 - $OUT/ab.log <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    cells = [f"{k} {v['ms']:.4f}" + ("" if v.get("ok", True) else " BAD")
             for k, v in r.items() if isinstance(v, dict) and "ms" in v]
    print(r["name"], " | ".join(cells))
PY
for tool in memcheck racecheck synccheck; do
  FUSEC_TORCH_REFERENCE=0 timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 \
    python3 test/gpu/fuzz_attention.py run $C/${FUZZ%% *} --limit 3 > $OUT/fz-$tool.log 2>&1
  echo "$tool rc $?"; tail -n 1 $OUT/fz-$tool.log
done
