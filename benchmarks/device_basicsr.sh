#!/usr/bin/env bash
# BasicSR-family repositories' own training with their own loader and with `python -m pairload.basicsr`, on the GPU
# host in one device call (no network there): each repository trains --iters iterations (default 300) from a copy of
# its option file, both ways, and their MessageLogger's `time (data)` lines and it/s go to $OUT/device_basicsr.json,
# every log to $OUT/logs. The repositories' trees are given as folders (e.g. made with `git archive`); a LOL-v1-shaped
# folder with --data DIR, else one is synthesized (485 + 15 pairs of 600x400). Run from pairload's repository root:
#   bash benchmarks/device_basicsr.sh RETINEXFORMER_DIR RESTORMER_DIR [--data DIR] [--iters 300] [--rounds 2]
#                                     [--wheels DIR] [--dry]
# Their packages beyond torch, torchvision, numpy, opencv-python-headless, scikit-image, pyyaml and tqdm: einops and
# lmdb (both repositories); --wheels DIR installs what is missing from a folder of wheels (pip --no-index).
# --dry: CPU (num_gpu: 0), a few iterations of 64x64 crops on small synthesized images.
set -uo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,12p' "$0"
  exit 2
fi
retinexformer=$1
restormer=$2
shift 2
out=${OUT:-out}
mkdir -p "$out"
# Retinexformer's and Restormer's setup.py write basicsr/version.py; their trees carry one, check it is there
for repo in "$retinexformer" "$restormer"; do
  [ -f "$repo/basicsr/version.py" ] || printf "__version__ = '1.2.0'\nshort_version = '1.2.0'\nversion_info = (1, 2, 0)\n" > "$repo/basicsr/version.py"
done
python3 benchmarks/device_basicsr.py --repo retinexformer="$retinexformer" --repo restormer="$restormer" \
  --out "$out" "$@"
rc=$?
python3 - "$out/device_basicsr.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
print(f"{doc.get('device')} torch {doc.get('torch')}, {doc['iters']} iterations, missing: {doc['missing']}")
for r in doc["runs"]:
    print(f"{r['repo']:14s} {r['mode']:9s} rc {r['rc']}  {r.get('it_per_s')} it/s  time (data) "
          f"{r.get('time_mean')} ({r.get('data_mean')}), data share {r.get('data_share')}")
PY
exit $rc
