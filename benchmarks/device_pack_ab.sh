#!/usr/bin/env bash
# Pack against its decode bound for two trees, interleaved, in one device call: for each pair count N given, REPEAT
# rounds of `benchmarks/bench_pack.py --repeat 1` (its own decode bound, then the pack) with the previous commit's
# `pairload` (a tree carried in .devwheels/prev: `git archive COMMIT pairload | tar x -C .devwheels/prev`) and with
# this tree's, each result written to $OUT as pack-N-TREE-ROUND.json. Carry .devwheels/extra and .devwheels/prev.
#   REPEAT=2 PACK_WORKERS=16 bash benchmarks/device_pack_ab.sh 1000 4000
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devwheels/extra/*.whl
here=$PWD
for n in "$@"; do
  for round in $(seq 1 "${REPEAT:-2}"); do
    for tree in prev cur; do
      src=$here; [ "$tree" = prev ] && src=$here/.devwheels/prev
      PYTHONPATH=/tmp/site:$src python3 -P "$here/benchmarks/bench_pack.py" --pairs "$n" --workers "$(nproc)" \
        --pack-workers "${PACK_WORKERS:-$(nproc)}" --work "/tmp/pb$n" --sample 20 \
        --out "$OUT/pack-$n-$tree-$round.json" > "/tmp/pack-$n-$tree-$round.log" 2>&1 || tail -5 "/tmp/pack-$n-$tree-$round.log"
      python3 -c "import json,sys; d=json.load(open(sys.argv[1])); p=d['pack']; print(sys.argv[2], d['pairs'], 'bound', round(d['decode_bound']['pairs_per_s']), 'pack', round(p['pairs_per_s']), 'ratio', round(d['analysis']['pack_over_decode_bound'], 3), {k: round(v, 3) for k, v in p['phases_s'].items()}, 'cpu', round(p['cpu_parent_s'], 1), round(p['cpu_workers_s'], 1))" "$OUT/pack-$n-$tree-$round.json" "$tree"
    done
  done
done
