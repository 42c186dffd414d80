#!/usr/bin/env bash
# Lossless encoded packs on the GPU host, in one device call: PAIRS low-light pairs of real photographs (600x400 PNG,
# `benchmarks/lossless_probe.py`'s: scikit-image's photos, inputs a tenth of the light with sensor noise) packed
# decoded and encoded (--store encoded: lossless tiles), then `bench-loaders` with LOADERS on each (crop 256, batch
# 32, on the GPU; decode path for the encoded one), each result written to $OUT as soon as it is done. Run from the
# repository root there, with pairload's needs on PYTHONPATH:   bash benchmarks/device_lossless.sh 4096 ram,wds
set -uo pipefail
pairs=${1:-4096}
loaders=${2:-ram,wds}
work=/tmp/lossless
if [ ! -d "$work/raw" ]; then
  python3 benchmarks/lossless_raw.py "$work/raw" "$pairs"
fi
for store in decoded encoded; do
  [ -f "$work/$store/manifest.json" ] || python3 -m pairload.cli pack "$work/raw" "$work/$store" --store "$store" \
    --workers "$(nproc)" > "$OUT/pack-$store.log" 2>&1
  tail -4 "$OUT/pack-$store.log"
  du -sh "$work/$store"
  python3 -m pairload.cli bench-loaders "$work/$store" --loaders "$loaders" --device cuda --workers 2 \
    --out "$OUT/bench-$store.json" > "$OUT/bench-$store.log" 2>&1
  tail -15 "$OUT/bench-$store.log"
done
