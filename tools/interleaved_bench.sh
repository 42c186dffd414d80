#!/usr/bin/env bash
# GPU machine: bench-loaders on two package trees in turn (A B B A ...), so that a change is measured next to the
# commit before it in one session. Usage, from the repo root after the DALI/webdataset wheels are in /tmp/site:
#   bash tools/interleaved_bench.sh OLD_TREE NEW_TREE ROUNDS LOADERS
# Each tree is a folder holding a `pairload` package. Results: $OUT/results/interleaved-<tree>-<round>.json.
set -uo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-2} LOADERS=${4:-ram,ram-workers,ram-resident,wds,dali-external}
W=${PAIRLOAD_WORK:-/tmp/pl}
R=$OUT/results
mkdir -p "$W" "$R"
CORES=$(nproc)
export PYTHONUNBUFFERED=1
if [ ! -f "$W/shards/manifest.json" ]; then
  PYTHONPATH=/tmp/site:$NEW python3 -m pairload.cli synth "$W/raw" --pairs 1024 --test 64 --size 600x400 \
    --workers "$CORES" | tail -1
  PYTHONPATH=/tmp/site:$NEW python3 -m pairload.cli pack "$W/raw" "$W/shards" --shard-size 64MB | tail -1
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$R/gpu.txt" 2>&1
for ((k = 0; k < ROUNDS; k++)); do
  if ((k % 2 == 0)); then order="old new"; else order="new old"; fi
  for tag in $order; do
    tree=$OLD; [ "$tag" = new ] && tree=$NEW
    echo "== $(date -u +%FT%TZ) round $k $tag"
    PYTHONPATH=/tmp/site:$tree python3 -m pairload.cli bench-loaders "$W/shards" --loaders "$LOADERS" \
      --workers $((CORES - 1)) --seconds 3 --repeats 3 --out "$R/interleaved-$tag-$k.json" 2>&1 \
      | grep -E "pairs/s|limits" | grep -v "^│" | head -12
  done
done
