#!/usr/bin/env bash
# Pack against its decode bound on the GPU host, in one device call (its time is short): for each pair count given,
# `benchmarks/bench_pack.py` on 600x400 synthetic pairs with every core, two interleaved repeats, each result written
# to $OUT as soon as it is done. Run from the repository root there, with `.devwheels/extra` carried (the psutil and
# isal wheels for that machine's Python):   bash benchmarks/device_pack.sh 1000 4000
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devwheels/extra/*.whl
export PYTHONPATH=/tmp/site:$PWD
python3 -c "import zlib; from pairload.format.crc import crc32; print('crc32 from', crc32.__module__)" | tee "$OUT/crc.txt"
for n in "$@"; do
  python3 benchmarks/bench_pack.py --pairs "$n" --workers "$(nproc)" --work "/tmp/pb$n" --repeat 2 --sample 100 \
    --out "$OUT/pack-bound-$n.json" > "$OUT/pack-bound-$n.log" 2>&1
  tail -3 "$OUT/pack-bound-$n.log"
done
