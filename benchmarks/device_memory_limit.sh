#!/usr/bin/env bash
# memory_limit.py on the GPU host in one device call: a 4.3 GB split (PAIRS=3000 pairs of 600x400 in 256 MB shards,
# made once, by PACK_TREE's pairload: default ".") read one whole cold epoch by each loader under a 2 GB cgroup limit
# (LIMIT_GB; PAIRS=6000 LIMIT_GB=4: an 8.7 GB split under half its size), for each tree given in turn (a
# comma-separated list; "." is this checkout, another a carried folder holding a `pairload` package, e.g. the previous
# commit's, repeated for an interleaved A/B). Run from the repository root there, with `.devwheels/extra` carried:
#   bash benchmarks/device_memory_limit.sh .,.devwheels/prevlimit,.,.devwheels/prevlimit
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devwheels/extra/*.whl 2>/dev/null
pairs=${PAIRS:-3000}
work=/tmp/memory-limit-$pairs
pack=/tmp/site:$(cd "${PACK_TREE:-.}" && pwd)
if [ ! -f "$work/shards/manifest.json" ]; then
  t0=$(date +%s)
  PYTHONPATH=$pack python3 -m pairload.cli make-pairs "$work/raw" --pairs "$pairs" --test 0 --workers "$(nproc)" >/dev/null
  PYTHONPATH=$pack python3 -m pairload.cli pack "$work/raw" "$work/shards" --shard-size 256MB --workers "$(nproc)" \
    >/dev/null
  echo "split made in $(( $(date +%s) - t0 )) s: $(du -sh "$work/shards" | cut -f1)"
fi
df -h "$work" | tail -1
grep -H . /sys/block/*/queue/read_ahead_kb 2>/dev/null | head -8
PYTHONPATH=/tmp/site python3 -u benchmarks/memory_limit.py "$work/shards" "$OUT/memory-limit-${LIMIT_GB:-2}gb-${pairs}.json" \
  --limit-gb "${LIMIT_GB:-2}" --loaders "${LOADERS:-wds,ram}" --trees "$1" | cut -c1-900
