#!/usr/bin/env bash
# Lossless tiles through the `ram` loader on the GPU host, this checkout against a previous one, interleaved, in one
# device call: PAIRS pairs of real photographs packed `--store encoded` (as benchmarks/device_lossless.sh packs them),
# then `bench-loaders --loaders ram --device cuda` (crop 256, batch 32) ROUNDS times for each of PREV (a folder holding
# the previous `pairload` package, e.g. from `git archive HEAD pairload | tar x -C PREV`) and this checkout, each
# result written to $OUT as soon as it is done. Run from the repository root there, pairload's needs on PYTHONPATH:
#   bash benchmarks/device_lossless_ab.sh PREV [PAIRS] [ROUNDS]
set -uo pipefail
prev=$1
pairs=${2:-1024}
rounds=${3:-2}
work=/tmp/lossless
if [ ! -f "$work/encoded/manifest.json" ]; then
  python3 benchmarks/lossless_raw.py "$work/raw" "$pairs"
  python3 -m pairload.cli pack "$work/raw" "$work/encoded" --store encoded --workers "$(nproc)" > "$work/pack.log" 2>&1
  tail -3 "$work/pack.log"
fi
for round in $(seq "$rounds"); do
  for which in prev new; do
    code=$PWD
    [ "$which" = prev ] && code=$(cd "$prev" && pwd)
    # run from the code's own folder: `python -m` puts the working directory first on the path
    (cd "$code" && python3 -m pairload.cli bench-loaders "$work/encoded" --loaders ram --device cuda --workers 2 \
      --out "$OUT/bench-$which-$round.json" > "$work/bench-$which-$round.log" 2>&1) || tail -20 "$work/bench-$which-$round.log"
    echo "$which $round: $(python3 -c "import json, sys; r = json.load(open(sys.argv[1]))['results'][0]; \
print(round(r['pairs_per_s']), [round(v) for v in r['repeats']], r['status'])" "$OUT/bench-$which-$round.json")"
  done
done
