#!/usr/bin/env bash
# The reference loop's scaling on one host (2 or 4 GPUs): where its time goes at the epochs' edges
# (benchmarks/epoch_edges.py) on 1 and N GPUs, interleaved, and the step alone (benchmarks/profile_step.py) with
# DDP's settings varied. Usage on the GPU machine, from the repository root: bash benchmarks/device_scale.sh N [REPS]
# Results: $OUT/scale-*.json (one per run and rank 0), $OUT/step-*.json.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
N=${1:-2}; REPS=${2:-2}; EPOCHS=${EPOCHS:-6}
W=/tmp/pl4; mkdir -p "$W" "$OUT"
stamp() { echo "== $(date -u +%T) $*"; }
[ -f "$W/raw/synth.json" ] || python -m pairload.cli synth "$W/raw" --pairs 4096 --test 64 --size 600x400 --workers "$(nproc)" | tail -1
[ -f "$W/shards/manifest.json" ] || python -m pairload.cli pack "$W/raw" "$W/shards" --shard-size 64MB | tail -1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > "$OUT/gpus.txt"
for rep in $(seq "$REPS"); do
  for n in 1 "$N"; do
    stamp "loop nproc $n rep $rep ${VARIANT:-}"
    torchrun --standalone --nproc_per_node="$n" benchmarks/epoch_edges.py --out "$OUT/scale-${n}gpu-r$rep${TAG:-}.json" -- \
      --shards "$W/shards" --loader ram --epochs "$EPOCHS" --batch-size 32 --crop 256 --amp bf16 --workers 6 \
      --val-split none ${EXTRA:-} 2>&1 | grep -E '^\{"rank": 0|rror' | python -c "
import json,sys
for l in sys.stdin:
    if not l.startswith('{'): print(l.strip()); continue
    for e in json.loads(l)['epochs']: print({k: e[k] for k in ('epoch','pairs_per_s','host_to_first_batch_s','sync_s','gather_s','gpu_steps_span_s','gpu_gap_before_s','host_between_epochs_s')})"
  done
done
for n in 1 "$N"; do
  for v in "" "--no-broadcast-buffers"; do
    stamp "step nproc $n $v"
    torchrun --standalone --nproc_per_node="$n" benchmarks/profile_step.py $v --out "$OUT/step-${n}gpu${v:+-nobb}.json" 2>&1 | grep "^{" | cut -c1-400
  done
done
