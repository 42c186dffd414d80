#!/usr/bin/env bash
# bench-loaders on the GPU host in one device call: 1,024 synthetic 600x400 pairs in 64 MB shards (made once), then
# for each TREE:LOADERS given (TREE a folder holding a `pairload` package: "." is this checkout, another is carried,
# e.g. the previous commit's for an interleaved A/B) `bench-loaders --cold` with those loaders, each result written to
# $OUT as soon as it is done (BENCH_ARGS replaces `--cold`, e.g. "--consumer unet"; DALI is installed from /tmp/ch when
# its chunks were sent). Run from the repository root there, with `.devwheels/extra` carried:
#   bash benchmarks/device_loaders.sh .:ram,wds,wds-workers .devwheels/prev:ram,wds .:ram,wds
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devwheels/extra/*.whl 2>/dev/null
if [ -d /tmp/ch ] && [ ! -d /tmp/site/nvidia/dali ]; then  # DALI's wheels, sent in chunks (../shared/gpu/README.md)
  cat /tmp/ch/part* | tar xf - -C /tmp && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/wh/*.whl
fi
work=/tmp/bench-loaders
if [ ! -f "$work/shards/manifest.json" ]; then
  PYTHONPATH=/tmp/site:$PWD python3 -m pairload.cli synth "$work/raw" --pairs 1024 --test 0 --workers "$(nproc)" >/dev/null
  PYTHONPATH=/tmp/site:$PWD python3 -m pairload.cli pack "$work/raw" "$work/shards" --shard-size 64MB --workers 0 >/dev/null
fi
k=0
for arg in "$@"; do
  tree=${arg%%:*}; loaders=${arg#*:}
  k=$((k + 1))
  name=$(basename "$(cd "$tree" && pwd)")
  PYTHONPATH=/tmp/site:$(cd "$tree" && pwd) python3 -P -m pairload.cli bench-loaders "$work/shards" --loaders "$loaders" \
    --seconds "${SECONDS_PER_LOADER:-4}" ${BENCH_ARGS:---cold} --out "$OUT/loaders-$k-$name.json" > "/tmp/loaders-$k-$name.log" 2>&1
  rc=$?
  echo "== $k $tree ($(PYTHONPATH=$(cd "$tree" && pwd) python3 -P -c 'import pairload, os; print(os.path.dirname(pairload.__file__))')): rc $rc"; tail -25 "/tmp/loaders-$k-$name.log" | cut -c1-200
done
