#!/usr/bin/env bash
# Synthesis on the GPU host in one device call: the GPU tests of pairload.degrade, the kernels alone and `ram` with and
# without a degradation (benchmarks/synth_kernels.py), and the reference U-Net loop with and without
# `--degrade lowlight`, interleaved; everything written to $OUT. Run from the repository root there:
#   bash benchmarks/device_synth.sh
set -uo pipefail
work=/tmp/bench-synth
if [ ! -f "$work/shards/manifest.json" ]; then
  python3 -m pairload.cli synth "$work/raw" --pairs 1024 --test 0 --workers "$(nproc)" >/dev/null
  python3 -m pairload.cli pack "$work/raw" "$work/shards" --shard-size 64MB --workers 0 >/dev/null
  python3 -m pairload.cli pack "$work/raw/train/high" "$work/targets" --targets-only --shard-size 64MB --workers 0 >/dev/null
fi
python3 -m pytest tests/degrade/test_kernels_gpu.py tests/degrade/test_loaders_gpu.py -m gpu -q -s 2>&1 | grep -E "max|passed|failed" | tee "$OUT/gpu-tests.txt"
PYTHONPATH=$PWD python3 benchmarks/synth_kernels.py "$work/shards" "$OUT/synth-kernels.json" | grep -E "pairs/s|^ram"
for round in 1 2; do
  for degrade in none lowlight; do
    name=unet-$degrade-$round
    args=(--loader ram --batch-size 32 --crop 256 --amp bf16 --workers 8 --val-split none --epochs 3 --repeats 4)
    if [ "$degrade" = none ]; then src=("--shards" "$work/shards"); else src=("--shards" "$work/targets" "--degrade" "$degrade"); fi
    python3 -m pairload.train "${args[@]}" "${src[@]}" --out "/tmp/$name" > "$OUT/$name.log" 2>&1
    echo "== $name rc $?"; grep -E "pairs/s" "$OUT/$name.log" | tail -3
    cp "/tmp/$name/metrics.jsonl" "$OUT/$name.metrics.jsonl" 2>/dev/null
  done
done
