#!/bin/bash
# Sibling GEMMs, timed (one device call, about 5 minutes; carry .device-carry/zs,
# .device-carry/zs_base, .device-carry/sibblk, .device-carry/sibblk_apart). Built here by:
#   python bench/zoo_gpu.py build .device-carry/zs --only bert llama vit t5_encoder whisper_encoder
#   python bench/zoo_gpu.py build .device-carry/zs_base --off gemm_siblings --only (the same)
#   test/gpu/movement.py's llama_block with and without gemm_siblings (.device-carry/sibblk,
#   .device-carry/sibblk_apart)
# The zoo's transformers (full size, bf16): this build against the same models with their
# projections apart (`--base`), beside eager and Inductor in one process; then the LLaMA
# block merged and apart.
export OUT=${OUT:-/tmp/out}
mkdir -p $OUT /tmp/pp && ln -sfn $PWD /tmp/pp/fusec; export PYTHONPATH=/tmp/pp
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 330 python3 bench/zoo_gpu.py run .device-carry/zs $OUT/zoo --base .device-carry/zs_base --reps 20 > $OUT/zoo.log 2>&1
echo "zoo rc $?"; grep -v "^ " $OUT/zoo.log | tail -n 30
for d in sibblk sibblk_apart; do
  timeout 90 python3 test/gpu/movement.py run .device-carry/$d llama_block > $OUT/llama-$d.log 2>&1
  echo "llama $d rc $?"; tail -n 6 $OUT/llama-$d.log
done
