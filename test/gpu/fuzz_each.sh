#!/bin/bash
# Every program of a fuzz_cuda folder in a process of its own under compute-sanitizer
# (a fault poisons the CUDA context of every later program in one process); prints the
# failures and the first sanitizer lines of each.  bash test/gpu/fuzz_each.sh DIR [TOOL]
dir=$1; tool=${2:-memcheck}; bad=0; n=0
for so in "$dir"/p*_fused.so; do
  name=$(basename "$so" _fused.so); n=$((n + 1))
  out=$(compute-sanitizer --tool "$tool" --print-limit 2 --error-exitcode 9 \
        python3 test/gpu/fuzz_cuda.py run "$dir" --only "$name" 2>&1)
  if [ $? -ne 0 ]; then
    bad=$((bad + 1))
    echo "== $name"; echo "$out" | grep -E "FAIL|Invalid|at fusec|by thread|Access|ERROR SUMMARY|misaligned" | head -8
  fi
done
echo "fuzz_each ($tool): $n programs, $bad with a failure or a sanitizer error"
