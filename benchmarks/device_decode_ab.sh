#!/usr/bin/env bash
# The decode path's A/B on the GPU host in one device call (nvImageCodec's wheels in .devwheels/img and
# .devwheels/extra carried): the reference loop on one GPU over a targets-only JPEG pack read cold, one epoch per
# tree (its data wait), then encoded_cold.py's cold and second-epoch rates on 2 cores. A tree: name=folder[+knob…]
# (knobs: benchmarks/diag_knobs.py).
# CONTENT=real: windows of real photographs (60 KB each) in place of photo-like noise (99 KB).
#   TRAIN_TREES="new=. prev=.devwheels/prev" TREES=new=.,prev=.devwheels/prev bash benchmarks/device_decode_ab.sh [PHOTOS]
set -uo pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .devwheels/img/*.whl \
  .devwheels/extra/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD
photos=${1:-40000}
content=${CONTENT:-synthetic}
work=/tmp/decode-ab-$content
python3 -u benchmarks/encoded_cold.py "$work" "$OUT" --photos "$photos" --decoded 0 --trees "${TREES:-new=.}" \
  --content "$content" --rounds 0 --modes make > /dev/null
for spec in ${TRAIN_TREES:-new=.}; do  # name=folder[+knob…]
  name=${spec%%=*}; rest=${spec#*=}; tree=${rest%%+*}; knobs=; [ "$rest" != "$tree" ] && knobs=${rest#*+}
  python3 -c "import sys; from pairload.bench.bounds import evict; from pairload.read.shards import ShardDataset; \
evict(ShardDataset(sys.argv[1], 'train').files)" "$work/encoded"
  (cd "$tree" && PYTHONPATH=/tmp/site:$PWD python3 "$OLDPWD/benchmarks/diag_knobs.py" "$knobs" -m pairload.train \
    --shards "$work/encoded" --degrade lowlight --val-split none --epochs "${EPOCHS:-1}" --out "/tmp/run-$name" \
    --overwrite > "$OUT/unet-$name.log" 2>&1) || tail -5 "$OUT/unet-$name.log"
  cp "/tmp/run-$name/metrics.jsonl" "$OUT/unet-$name.jsonl" 2>/dev/null
  python3 -c "import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if 'data_wait_frac' in r: print(sys.argv[2], r.get('epoch'), round(r.get('pairs_per_s', 0)), r['data_wait_frac'])" \
    "/tmp/run-$name/metrics.jsonl" "$name"
done
python3 -u benchmarks/encoded_cold.py "$work" "$OUT" --photos "$photos" --decoded 0 --trees "${TREES:-new=.}" \
  --content "$content" --rounds "${ROUNDS:-2}" --cores 2 --modes "${MODES:-cold,epoch2}" | cut -c1-300
python3 -c "import json, sys
for r in json.load(open(sys.argv[1]))['rows']:
    print(r.get('tree'), r.get('mode', 'cold'), r.get('round'), round(r.get('pairs_per_s', 0)),
          round(r.get('after_first_pairs_per_s', 0)), r.get('error', '')[-300:])" "$OUT/encoded-cold.json"
