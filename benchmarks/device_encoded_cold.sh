#!/usr/bin/env bash
# encoded_cold.py on the GPU host in one device call (DALI's wheels, which carry nvImageCodec, installed in /tmp/site
# and `.devwheels/extra` carried): PHOTOS photo-like 600x400 JPEGs packed targets-only, encoded and (a subset)
# decoded; cold epochs from construction for this checkout and PREV interleaved, a profile of one; then the reference
# loop on one GPU for EPOCHS epochs over the encoded pack from a cold page cache (its data wait per epoch).
#   CORES=2,16 ROUNDS=2 bash benchmarks/device_encoded_cold.sh PREV [PHOTOS] [EPOCHS]
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devwheels/extra/*.whl 2>/dev/null
prev=$1
photos=${2:-118000}
epochs=${3:-2}
work=/tmp/encoded-cold
python3 -u benchmarks/encoded_cold.py "$work" "$OUT" --photos "$photos" --decoded 8000 --trees "new=.,prev=$prev" \
  --rounds "${ROUNDS:-2}" --cores "${CORES:-2}" --profile | cut -c1-600
head -60 "$OUT/profile-cold.txt" | cut -c1-160
if [ "$epochs" -gt 0 ]; then
  python3 -c "import sys; from pairload.bench.bounds import evict; from pairload.read.shards import ShardDataset; \
evict(ShardDataset(sys.argv[1], 'train').files)" "$work/encoded"
  python3 -m pairload.train --shards "$work/encoded" --degrade lowlight --val-split none --epochs "$epochs" \
    --out /tmp/run-encoded --overwrite > "$OUT/unet-encoded.log" 2>&1 || tail -20 "$OUT/unet-encoded.log"
  cp /tmp/run-encoded/metrics.jsonl "$OUT/unet-encoded.jsonl" 2>/dev/null
  python3 -c "import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if 'data_wait_frac' in r: print(r.get('epoch'), round(r.get('pairs_per_s', 0)), r['data_wait_frac'])" \
    /tmp/run-encoded/metrics.jsonl
fi
