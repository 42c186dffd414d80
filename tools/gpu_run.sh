#!/usr/bin/env bash
# GPU-machine helper: run the GPU/DALI tests and the benchmarks there, collecting everything under $OUT.
# Usage (from the repo root on the GPU machine, after the DALI/webdataset wheels are installed in /tmp/site):
#   bash tools/gpu_run.sh tests pack loaders memory train-1 train-2
# Results land in $OUT/results/ and are packed into $OUT/results.tar (the device tool returns few files).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
W=${PAIRLOAD_WORK:-/tmp/pl}
R=$OUT/results
mkdir -p "$W" "$R"
CORES=$(nproc)
PY=python3
stamp() { echo "== $(date -u +%FT%TZ) $*"; }

data() {
  if [ ! -f "$W/raw/synth.json" ]; then
    stamp synth; $PY -m pairload.cli synth "$W/raw" --pairs 1024 --test 64 --size 600x400 --workers "$CORES" || return 1
  fi
  if [ ! -f "$W/shards/manifest.json" ]; then
    # 64MB shards: ~45 pairs each, 23 train shards, enough for 15 WebDataset workers to stream in parallel
    stamp pack; $PY -m pairload.cli pack "$W/raw" "$W/shards" --shard-size 64MB || return 1
  fi
}

pairs_at() {  # pairs_at DIR N: N synthetic 600x400 training pairs (and 64 test) packed under DIR
  mkdir -p "$1"
  [ -f "$1/raw/synth.json" ] || $PY -m pairload.cli synth "$1/raw" --pairs "$2" --test 64 --size 600x400 --workers "$CORES" | tail -1
  [ -f "$1/shards/manifest.json" ] || $PY -m pairload.cli pack "$1/raw" "$1/shards" --shard-size 64MB | tail -1
}

scale_train() {  # scale_train DIR TAG: the reference loop on 1, 2 and 4 GPUs, same per-GPU batch
  for N in 1 2 4; do
    stamp "torchrun nproc $N"
    torchrun --standalone --nproc_per_node=$N -m pairload.train --shards "$1/shards" --loader ram --epochs 3 \
      --batch-size 32 --crop 256 --amp bf16 --workers 6 --val-split none --out "$1/scale-$N" 2>&1 | grep -E "^epoch|rror"
    cp "$1/scale-$N/metrics.jsonl" "$R/train-$2-${N}gpu.jsonl"
  done
}

for stage in "$@"; do
  case $stage in
    tests)
      stamp tests
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$R/gpu.txt" 2>&1
      $PY -m pytest -q -m "gpu or dali" tests/ 2>&1 | tail -40 > "$R/pytest-gpu.log"
      tail -3 "$R/pytest-gpu.log" ;;
    pack)
      data || exit 1
      stamp bench_pack
      $PY benchmarks/bench_pack.py "$W/raw" "$W/shards-bench" --out "$R/pack.json" | tail -4
      $PY -m pairload.cli verify "$W/shards" ;;
    loaders)
      data || exit 1
      [ -d "$W/raw-jpg" ] || $PY tools/convert_format.py "$W/raw" "$W/raw-jpg" --ext .jpg --quality 95 --workers "$CORES"
      stamp bench-loaders png
      $PY -m pairload.cli bench-loaders "$W/shards" --raw "$W/raw" --workers $((CORES - 1)) --seconds 6 \
        --out "$R/loaders.json" --plot "$R/loaders.png" 2>&1 | tail -30
      stamp bench-loaders jpeg
      $PY -m pairload.cli bench-loaders "$W/shards" --raw "$W/raw-jpg" --loaders dali-file,cv2-disk \
        --workers $((CORES - 1)) --seconds 6 --out "$R/loaders-jpeg.json" 2>&1 | tail -12
      stamp bench-loaders unet
      $PY -m pairload.cli bench-loaders "$W/shards" --raw "$W/raw" --loaders ram,ram-resident,wds,dali-external,naive-pil \
        --workers $((CORES - 1)) --seconds 6 --consumer unet --out "$R/loaders-unet.json" 2>&1 | tail -16 ;;
    dali)
      # every loader in one run (dali-external next to ram), then where dali-external's time goes
      data || exit 1
      stamp "bench-loaders all"
      $PY -m pairload.cli bench-loaders "$W/shards" --raw "$W/raw" --workers $((CORES - 1)) --seconds 6 \
        --out "$R/loaders.json" --plot "$R/loaders.png" 2>&1 | tail -16
      stamp "profile dali-external"
      $PY benchmarks/profile_dali.py "$W/shards" --workers $((CORES - 1)) --prefetch 2,4 \
        --out "$R/profile-dali.json" 2>&1 | grep "^{'" ;;
    cold)
      # the split evicted from the page cache before each repeat, next to the disk's sequential read bound
      data || exit 1
      stamp "bench-loaders cold"
      $PY -m pairload.cli bench-loaders "$W/shards" --loaders ram,wds --cold --workers $((CORES - 1)) --seconds 6 \
        --out "$R/loaders-cold.json" --plot "$R/loaders-cold.png" 2>&1 | tail -14 ;;
    memory)
      data || exit 1
      stamp memory
      for L in ram wds; do
        $PY benchmarks/bench_memory.py "$W/shards" --loader $L --ranks "${RANKS:-2}" --workers 4 --seconds 12 \
          --out "$R/memory-$L-${RANKS:-2}ranks.json" | grep -E "pss|within|pairs"
      done ;;
    train-1)
      # one GPU: data-wait of the reference loop per loader, and the naive PIL Dataset (4 workers) in the same run
      data || exit 1
      for L in ram dali-external wds; do
        stamp "train $L"
        $PY -m pairload.train --shards "$W/shards" --loader $L --epochs 4 --batch-size 32 --crop 256 --amp bf16 \
          --workers 8 --out "$W/run-$L" 2>&1 | grep -E "epoch|error"
        cp "$W/run-$L/metrics.jsonl" "$R/train-1gpu-$L.jsonl"
      done
      cp "$W/run-ram/val-epoch004.png" "$R/val-ram-epoch004.png"
      stamp "naive-pil consumer"
      $PY -m pairload.cli bench-loaders "$W/shards" --raw "$W/raw" --loaders naive-pil,ram --workers 4 --seconds 9 \
        --consumer unet --out "$R/train-1gpu-naive-pil.json" 2>&1 | tail -8 ;;
    train-2)
      # scaling: the same per-GPU batch on 1 and 2 GPUs (NCCL)
      data || exit 1
      for N in 1 2; do
        stamp "torchrun nproc $N"
        torchrun --standalone --nproc_per_node=$N -m pairload.train --shards "$W/shards" --loader ram --epochs 4 \
          --batch-size 32 --crop 256 --amp bf16 --workers 6 --out "$W/scale-$N" 2>&1 | grep -E "^epoch|error"
        cp "$W/scale-$N/metrics.jsonl" "$R/train-scale-${N}gpu.jsonl"
      done
      nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpus.txt" ;;
    scale)
      # 1 -> 2 -> 4 GPUs (NCCL), same per-GPU batch, 4,096-pair epochs; then the node's loader throughput with one
      # loader per GPU, next to one rank alone; then host memory with 4 ranks x workers
      W=${PAIRLOAD_WORK:-/tmp/pl4}
      pairs_at "$W" 4096
      scale_train "$W" scale
      for N in 1 4; do
        stamp "profile step nproc $N"
        torchrun --standalone --nproc_per_node=$N benchmarks/profile_step.py --out "$R/profile-step-${N}gpu.json" 2>&1 | grep "^{"
        torchrun --standalone --nproc_per_node=$N benchmarks/profile_step.py --compile --out "$R/profile-step-${N}gpu-compile.json" 2>&1 | grep "^{"
      done
      for N in 4 1; do
        stamp "bench-loaders --ranks $N"
        $PY -m pairload.cli bench-loaders "$W/shards" --raw "$W/raw" --loaders ram,wds,dali-external,dali-file \
          --ranks $N $( [ $N = 1 ] && echo "--workers 15" ) --seconds 6 --out "$R/loaders-ranks$N.json" 2>&1 | grep -E "^│|limits"
      done
      stamp "memory 4 ranks"
      for L in ram wds; do
        $PY benchmarks/bench_memory.py "$W/shards" --loader $L --ranks 4 --workers 15 --seconds 12 \
          --out "$R/memory-$L-4ranks.json" | grep -E "pss|within|pairs"
      done
      nvidia-smi --query-gpu=name --format=csv,noheader > "$R/gpus.txt" ;;
    scale-long)
      # the same scaling with 16,384-pair epochs (128 steps per epoch on 4 GPUs instead of 32: an epoch's start and
      # end cost the same on every GPU count, so short epochs understate scaling); and ram's memory with 4 ranks
      # at 4 and 8 workers each (no DALI or webdataset needed)
      pairs_at /tmp/pl16 16384
      scale_train /tmp/pl16 scale-long
      W4=/tmp/pl4  # memory on the 4,096-pair split of the scale stage (5.9 GB), where the fixed costs show
      pairs_at "$W4" 4096
      for K in 4 8; do
        stamp "memory ram 4 ranks x $K workers"
        $PY benchmarks/bench_memory.py "$W4/shards" --loader ram --ranks 4 --workers $K --seconds 10 \
          --out "$R/memory-ram-4ranks-${K}workers.json" | grep -E "pss|within"
      done ;;
    ab|ab-unet)
      # A/B against the previous commit, interleaved in one session (machines differ by +-20%): its package is
      # unpacked under .ab/old (`git archive <commit> pairload | tar -x -C .ab/old`) and carried along
      data || exit 1
      if [ "$stage" = ab ]; then what="--loaders ram,ram-resident,wds,dali-external"; else what="--loaders ram,wds,dali-external --consumer unet"; fi
      what=${AB_WHAT:-$what}  # e.g. AB_WHAT="--loaders ram" AB_ROUNDS="1 2 3 4" for one kind, more rounds
      for round in ${AB_ROUNDS:-1 2}; do
        for side in old new; do
          # run from the side's own folder: `python -m` puts the working folder first on sys.path
          P=$PWD; [ $side = old ] && P=$PWD/.ab/old
          stamp "$stage $side round $round: $(cd "$P" && $PY -c 'import pairload; print(pairload.__file__)')"
          (cd "$P" && PYTHONPATH=/tmp/site:$P $PY -m pairload.cli bench-loaders "$W/shards" $what --workers $((CORES - 1)) \
            --seconds 5 --repeats 3 --out "$R/$stage-$side-$round.json" 2>&1 | tail -9)
        done
      done ;;
    profile-wds)
      data || exit 1
      stamp profile-wds
      $PY benchmarks/profile_wds.py "$W/shards" --out "$R/profile-wds.json" ;;
    *) echo "unknown stage $stage" ;;
  esac
done
tar cf "$OUT/results.tar" -C "$OUT" results && rm -rf "$R"
