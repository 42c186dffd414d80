#!/usr/bin/env bash
# Interleaved A/B of `pairload pack` through the CLI (the user's path: a fresh process, its own pool start):
#   bash benchmarks/pack_interleaved.sh RAW BASE_PYTHONPATH NEW_PYTHONPATH ROUNDS OUT.txt
# Each round packs RAW with the base code, then with the new code, into a fresh folder on the same disk; the
# lines give the wall seconds and the peak RSS of each.
set -euo pipefail
raw=$1 base=$2 new=$3 rounds=$4 out=$5
dest=$(mktemp -d "$(dirname "$raw")/ab.XXXX")
for i in $(seq 1 "$rounds"); do
  for side in base new; do
    path=$base; [ "$side" = new ] && path=$new
    rm -rf "$dest/shards"
    sync
    /usr/bin/time -f "$side round $i wall %e s maxrss %M KB" -a -o "$out" \
      env PYTHONPATH="$path" python3 -c "from pairload.cli import entry; entry()" pack "$raw" "$dest/shards" >/dev/null
  done
done
rm -rf "$dest"
cat "$out"
