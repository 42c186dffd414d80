#!/usr/bin/env bash
# One device call for a split read from disk under a memory limit (GPU host): `device_memory_limit.sh` (it installs
# the carried wheels and makes the split once: PAIRS pairs of 600x400, 12,000 by default, 8.8 GB, --store encoded:
# lossless tiles) runs `memory_limit.py` over the trees given (a comma-separated list, each "." or a carried folder
# holding a `pairload` package, each optionally @diag_knobs: `.,.@tight8,.devwheels/drop`), EPOCHS epochs each (3 by
# default), under a limit of half the split, first; then what that host's disk gives to an epoch's reading pattern
# (`readahead_probe.py`: WILLNEED ahead, pread, O_DIRECT readers) and what dropping pages costs there
# (`drop_emulation.py --costs`), then the emulation's ways of reading and letting go under the same limit (DROP_MODES,
# comma-separated; "" skips them), against the split read with no limit and no drops. Run from the repository root
# there, with `.devwheels/extra` and `.devwheels/nvcomp` carried:
#   bash benchmarks/device_limit_ab.sh .,.@tight8,.devwheels/drop,.devwheels/drop@tight8
set -uo pipefail
pairs=${PAIRS:-12000}
STORE=encoded PAIRS=$pairs LIMIT_GB=half EPOCHS=${EPOCHS:-3} bash benchmarks/device_memory_limit.sh "$1" \
  | grep -v read_ahead_kb | cut -c1-300
shards=/tmp/memory-limit-$pairs/shards-encoded  # where device_memory_limit.sh makes it
export PYTHONPATH=/tmp/site:$PWD
timeout 120 python3 -u benchmarks/readahead_probe.py "$shards" "$OUT/readahead-probe.json" --seconds 3 --rounds 1 \
  | cut -c1-300
python3 -u benchmarks/drop_emulation.py "$shards" --costs | tee "$OUT/drop-costs.json"
# how each way of reading and letting go reads this host's disk under the limit (DROP_MODES="": none), and unlimited
limit_mb=$(du -sb "$shards" | awk '{printf "%d", $1 / 2 / 2^20}')
modes=${DROP_MODES-thread,batch4,stream,streamwn,direct}
if [ -n "$modes" ]; then
  python3 -u benchmarks/drop_emulation.py "$shards" --limit-mb 100000 --modes none | tee -a "$OUT/drop-emulation.jsonl"
  python3 -u benchmarks/drop_emulation.py "$shards" --limit-mb "$limit_mb" --modes "$modes" --rounds 2 \
    | tee -a "$OUT/drop-emulation.jsonl"
fi
