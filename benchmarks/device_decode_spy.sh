#!/usr/bin/env bash
# Where the decode path's threads spend their time, on the GPU host in one device call (nvImageCodec's wheels in
# .devwheels/img, psutil and fsspec in .devwheels/extra, py-spy in .devwheels/spy carried): a targets-only JPEG pack
# read cold and in its second epoch on 2 cores, plain, then sampled by py-spy (every thread, idle too; then only the
# thread holding the GIL). Collapsed stacks go to $OUT/spy-*/, summarised by benchmarks/spy_summary.py.
#   bash benchmarks/device_decode_spy.sh [PHOTOS]
set -uo pipefail
python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .devwheels/img/*.whl \
  .devwheels/extra/*.whl .devwheels/spy/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
photos=${1:-20000}
work=/tmp/decode-spy
run() { python3 -u benchmarks/encoded_cold.py "$work" "$1" --photos "$photos" --decoded 0 --trees "${TREES:-new=.}" \
  --rounds 1 --cores 2 --modes cold,epoch2 "${@:2}" | cut -c1-400; }
run "$OUT/plain"
run "$OUT/spy-idle" --wrap "py-spy record -r 250 -f raw --threads --idle -o $OUT/spy-idle/{label}.txt --"
run "$OUT/spy-gil" --wrap "py-spy record -r 250 -f raw --threads --gil -o $OUT/spy-gil/{label}.txt --"
