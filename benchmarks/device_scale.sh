#!/usr/bin/env bash
# The reference loop's scaling on one host: benchmarks/epoch_edges.py (the loop, its epochs' edges timed) on 1, 2
# (and 4) GPUs, interleaved over code checkouts, then optionally the step alone (benchmarks/profile_step.py) with
# DDP's buffer broadcast on and off. From the repository root on the GPU machine:
#   GPUS="1 2 4" REPS=1 EPOCHS=8 bash benchmarks/device_scale.sh [CHECKOUT ...]   (default: this one)
# Results: $OUT/scale-<checkout>-<n>gpu-r<rep>.json.rank0 (and the other ranks'), $OUT/step-*.json with STEP=1.
set -uo pipefail
export PYTHONUNBUFFERED=1
GPUS=${GPUS:-"1 2"}; REPS=${REPS:-1}; EPOCHS=${EPOCHS:-8}; HERE=$PWD
CODES=("$@"); [ ${#CODES[@]} -gt 0 ] || CODES=("$HERE")
W=/tmp/pl4; mkdir -p "$W" "$OUT"
stamp() { echo "== $(date -u +%T) $*"; }
export PYTHONPATH=$HERE
[ -f "$W/raw/synth.json" ] || python -m pairload.cli synth "$W/raw" --pairs 4096 --test 64 --size 600x400 --workers "$(nproc)" | tail -1
[ -f "$W/shards/manifest.json" ] || python -m pairload.cli pack "$W/raw" "$W/shards" --shard-size 64MB | tail -1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$OUT/gpus.txt"
for rep in $(seq "$REPS"); do
  for code in "${CODES[@]}"; do
    tag=$(basename "$code")
    for n in $GPUS; do
      stamp "loop $tag nproc $n rep $rep"
      PYTHONPATH=$code torchrun --standalone --nproc_per_node="$n" "$HERE/benchmarks/epoch_edges.py" \
        --out "$OUT/scale-$tag-${n}gpu-r$rep.json" -- --shards "$W/shards" --loader ram --epochs "$EPOCHS" \
        --batch-size 32 --crop 256 --amp bf16 --workers 6 --val-split none 2>&1 | grep -E '^\{"rank": 0|rror' |
        python -c "
import json,sys
for l in sys.stdin:
    if not l.startswith('{'): print(l.strip()); continue
    e = json.loads(l)['epochs']
    print(' '.join(f\"{r['pairs_per_s']:.0f}\" for r in e), '| span', ' '.join(f\"{r['gpu_steps_span_s']:.3f}\" for r in e))"
    done
  done
done
if [ "${STEP:-0}" = 1 ]; then
  for n in $GPUS; do
    for v in "" "--no-broadcast-buffers"; do
      stamp "step nproc $n $v"
      PYTHONPATH=$HERE torchrun --standalone --nproc_per_node="$n" benchmarks/profile_step.py $v \
        --out "$OUT/step-${n}gpu${v:+-nobb}.json" 2>&1 | grep "^{" | cut -c1-300
    done
  done
fi
