#!/usr/bin/env bash
# One device call for a split read from disk under a memory limit (GPU host): the split made once (PAIRS pairs of
# 600x400, --store encoded: lossless tiles; 12,000 by default, 8.8 GB), then what that host's disk gives to an
# epoch's reading pattern (`readahead_probe.py`: WILLNEED ahead, pread, O_DIRECT readers) and what dropping pages
# costs there (`drop_emulation.py --costs`), then `memory_limit.py` over the trees given (a comma-separated list, each
# "." or a carried folder holding a `pairload` package, each optionally @diag_knobs: `.,.@tight8,.devwheels/drop`),
# EPOCHS epochs each (3 by default), under a limit of half the split. Run from the repository root there, with
# `.devwheels/extra` and `.devwheels/nvcomp` carried:
#   bash benchmarks/device_limit_ab.sh .,.@tight8,.devwheels/drop,.devwheels/drop@tight8
set -uo pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .devwheels/extra/*.whl \
  .devwheels/nvcomp/*.whl 2>&1 | tail -2
pairs=${PAIRS:-12000}
work=/tmp/memory-limit-$pairs
shards=$work/shards-encoded
export PYTHONPATH=/tmp/site:$PWD
if [ ! -f "$shards/manifest.json" ]; then
  t0=$(date +%s)
  python3 -m pairload.cli make-pairs "$work/raw" --pairs "$pairs" --test 0 --workers "$(nproc)" >/dev/null
  python3 -m pairload.cli pack "$work/raw" "$shards" --shard-size 256MB --workers "$(nproc)" --store encoded >/dev/null
  rm -rf "$work/raw"
  echo "split made in $(( $(date +%s) - t0 )) s: $(du -sh "$shards" | cut -f1)"
fi
timeout 120 python3 -u benchmarks/readahead_probe.py "$shards" "$OUT/readahead-probe.json" --seconds 3 --rounds 1 \
  | cut -c1-300
python3 -u benchmarks/drop_emulation.py "$shards" --costs | tee "$OUT/drop-costs.json"
STORE=encoded PAIRS=$pairs LIMIT_GB=half EPOCHS=${EPOCHS:-3} bash benchmarks/device_memory_limit.sh "$1" \
  | grep -v read_ahead_kb | cut -c1-300
