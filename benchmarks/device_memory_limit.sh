#!/usr/bin/env bash
# memory_limit.py on the GPU host in one device call: a 4.3 GB split (PAIRS=3000 pairs of 600x400 in 256 MB shards,
# made once, by PACK_TREE's pairload: default ".") read one whole cold epoch by each loader under a 2 GB cgroup limit
# (LIMIT_GB, or LIMIT_GB=half: half the split's size; PAIRS=6000 LIMIT_GB=4: an 8.7 GB split under half its size),
# for each tree given in turn (a comma-separated list; "." is this checkout, another a carried folder holding a
# `pairload` package, e.g. the previous commit's, repeated for an interleaved A/B). EPOCHS=2: each loader reads that
# many epochs (each one's rate reported); STORE=encoded: the split packed with --store encoded (lossless tiles:
# make-pairs writes PNG pairs), which the GPU decodes (nvCOMP's wheel carried in .devwheels/nvcomp, nvImageCodec's in
# .devwheels/img); SIZE=1920x1080: pairs of that size instead of 600x400; ADJACENT=1: the disk's bound measured
# again around each row; BOUND_S=30: each bound read for up to 30 s (at most the split, read whole) instead of 3.
# Run from the repository root there,
# with `.devwheels/extra` carried:
#   bash benchmarks/device_memory_limit.sh .,.devwheels/prevlimit,.,.devwheels/prevlimit
set -uo pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .devwheels/extra/*.whl \
  $(ls .devwheels/img/*.whl .devwheels/nvcomp/*.whl 2>/dev/null) 2>/dev/null
pairs=${PAIRS:-3000}
store=${STORE:-decoded}
size=${SIZE:-600x400}  # SIZE=1920x1080: pairs of that size
work=/tmp/memory-limit-$pairs-$size
shards=$work/shards-$store
pack=/tmp/site:$(cd "${PACK_TREE:-.}" && pwd)
if [ ! -f "$shards/manifest.json" ]; then
  t0=$(date +%s)
  [ -d "$work/raw" ] || PYTHONPATH=$pack python3 -m pairload.cli make-pairs "$work/raw" --pairs "$pairs" --test 0 --size "$size" \
    --workers "$(nproc)" >/dev/null
  PYTHONPATH=$pack python3 -m pairload.cli pack "$work/raw" "$shards" --shard-size 256MB --workers "$(nproc)" \
    --store "$store" >/dev/null
  echo "split made in $(( $(date +%s) - t0 )) s: $(du -sh "$shards" | cut -f1)"
fi
limit=${LIMIT_GB:-2}
if [ "$limit" = half ]; then  # half the split's size
  limit=$(du -sb "$shards" | awk '{printf "%.3f", $1 / 2 / 2^30}')
fi
echo "split $(du -sh "$shards" | cut -f1), limit $limit GiB"
df -h "$work" | tail -1
grep -H . /sys/block/*/queue/{read_ahead_kb,max_sectors_kb,max_hw_sectors_kb,nr_requests,scheduler} 2>/dev/null | grep -v loop | head -24
PYTHONPATH=/tmp/site python3 -u benchmarks/memory_limit.py "$shards" \
  "$OUT/memory-limit-${LIMIT_GB:-2}gb-${pairs}-$store.json" --limit-gb "$limit" --loaders "${LOADERS:-wds,ram}" \
  --trees "$1" --epochs "${EPOCHS:-1}" --bound-seconds "${BOUND_S:-3}" ${ADJACENT:+--adjacent} | cut -c1-900
