#!/bin/bash
# What pack's measures add to packing 600x400 pairs on the GPU host's CPU cores, this tree against a previous one
# (its pairload/ under PREV; NEW: another folder for this tree's), alternated: benchmarks/bench_pack_measures.py
# --with-only, each pack a fresh process.
# Run from the project root on the device machine; each pack's JSON and a summary under $OUT.
#   bash benchmarks/device_measures_ab.sh PREV_DIR [PAIRS] [WORKERS] [ROUNDS] [EXT]
set -e
PREV=$1; PAIRS=${2:-2000}; WORKERS=${3:-16}; ROUNDS=${4:-3}; EXT=${5:-.jpg}
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devwheels/extra/*.whl 2>/dev/null
W=/tmp/measures-work$EXT
export PYTHONSAFEPATH=1  # the pairload on PYTHONPATH, not the one in the current folder (`python -c` puts it first)
for i in $(seq 1 "$ROUNDS"); do
  for which in prev new; do
    if [ "$which" = prev ]; then export PYTHONPATH=/tmp/site:$PWD/$PREV; else export PYTHONPATH=/tmp/site:$PWD/${NEW:-.}; fi
    json="$OUT/pack-measures-${EXT#.}-$which-$i.json"
    python3 benchmarks/bench_pack_measures.py --pairs "$PAIRS" --workers "$WORKERS" --repeat 1 --with-only \
      --ext "$EXT" --work "$W" --out "$json" > "/tmp/log-$which-$i.txt" 2>&1 || { tail -5 "/tmp/log-$which-$i.txt"; exit 1; }
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], d['in_pack_overhead'][0], \
d['seconds']['with'][0], d['cpu_seconds']['with'][0], d['pair_facts_ms_one_thread'])" "$json" "$which-$i" \
      | tee -a "$OUT/summary-${EXT#.}.txt"
  done
done
echo "$(nproc) cores, $(lscpu | grep 'Model name' | sed 's/  */ /g'), $(date -u +%F)" | tee -a "$OUT/summary-${EXT#.}.txt"
