#!/usr/bin/env bash
# 3840x2160 lossless pairs through `ram` on the GPU host, two code trees interleaved (rate and device memory): PAIRS
# pairs made by `lossless_raw.py` and packed `--store encoded` once, then `bench-loaders --loaders ram --device cuda`
# with each tree's pairload on PYTHONPATH in turn, ROUNDS times; then the tiles GPU tests on the first tree. Run from
# the repository root there, with pairload's needs (nvCOMP) under /tmp/site:
#   bash benchmarks/device_tiles_rows_ab.sh .,.devwheels/main 384 2
set -uo pipefail
IFS=, read -r -a trees <<< "${1:-.}"
for k in "${!trees[@]}"; do trees[$k]=$(realpath "${trees[$k]}"); done  # run from /tmp: the cwd's pairload never shadows
pairs=${2:-384}
rounds=${3:-2}
[ -d /tmp/r4k ] || python3 benchmarks/lossless_raw.py /tmp/r4k "$pairs" 2160x3840
[ -f /tmp/p4k/manifest.json ] || python3 -m pairload.cli pack /tmp/r4k /tmp/p4k --store encoded --workers "$(nproc)" \
  > "$OUT/pack-4k.log" 2>&1
for r in $(seq "$rounds"); do
  for k in "${!trees[@]}"; do
    (cd /tmp && PYTHONPATH="/tmp/site:${trees[$k]}" timeout 120 python3 -m pairload.cli bench-loaders /tmp/p4k --loaders ram \
      --device cuda --workers 2 --seconds 4 --out "$OUT/bench-4k-tree$k-round$r.json" > "$OUT/bench-4k-tree$k-round$r.log" 2>&1)
    echo "tree ${trees[$k]} round $r: rc $?"; grep -v "^frame" "$OUT/bench-4k-tree$k-round$r.log" | grep "ram" | tail -2
  done
done
(cd "${trees[0]}" && PYTHONPATH="/tmp/site:${trees[0]}" python3 -m pytest -q -m gpu tests/cut/test_tiles_gpu.py -p no:cacheprovider \
  > "$OUT/pytest-tiles.log" 2>&1); tail -2 "$OUT/pytest-tiles.log"
