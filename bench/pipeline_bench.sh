#!/usr/bin/env bash
# Input pipeline vs torchvision, side by side in one script run (this
# machine is noisy: compare within a run). On a generated folder of
# photo-like JPEGs (bench/make_jpeg_folder.py: 2,000 images of 500x375,
# quality 90, 10 classes), each epoch decodes every image, takes a random
# resized crop to 224x224, flips, normalises and batches (64):
#   bigbatch     `bigbatch bench pipeline`: W decode + W augment threads + 1 read thread
#   torchvision  ImageFolder + DataLoader, W worker processes (bench/torchvision_pipeline.py)
# Both run `rounds` times in turn, `epochs` epochs each (no cache). Reported
# per implementation: median img/s, and the median img/s per fully busy
# worker = images / CPU seconds (getrusage over all its threads or worker
# processes) — the per-worker throughput whatever the thread accounting.
# Usage: bench/pipeline_bench.sh [workers] [rounds] [epochs] [folder]
#        (defaults: 2 3 2 /tmp/bigbatch-jpegs; the folder is made if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${1:-2}
rounds=${2:-3}
epochs=${3:-2}
folder=${4:-/tmp/bigbatch-jpegs}
scripts/build --target bigbatch >/dev/null
/usr/bin/python3 -c 'import torchvision' 2>/dev/null || {
  echo "installing python3-torchvision (apt) for the reference" >&2
  ${SUDO:-$( [ "$(id -u)" = 0 ] || echo sudo)} apt-get install -y -q --no-install-recommends python3-torchvision >&2
}
[ -d "$folder" ] || /usr/bin/python3 bench/make_jpeg_folder.py "$folder" >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
  build/apps/bigbatch bench pipeline --dir "$folder" --workers "$workers" --epochs "$epochs" --json >> "$out"
  /usr/bin/python3 bench/torchvision_pipeline.py "$folder" --workers "$workers" --epochs "$epochs" >> "$out"
done
/usr/bin/python3 - "$out" "$workers" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = {}
print(f"{'impl':<12} {'workers':>7} {'epochs':>6} {'img/s':>9} {'img/s/worker':>13} {'(min-max)':>16}")
for impl in ("bigbatch", "torchvision"):
    r = [x for x in rows if x["impl"] == impl]
    ips = statistics.median(x["img_s"] for x in r)
    per = [x["img_per_cpu_s"] for x in r]
    med[impl] = statistics.median(per)
    print(f"{impl:<12} {sys.argv[2]:>7} {len(r):>6} {ips:>9.1f} {med[impl]:>13.1f} "
          f"{min(per):>7.1f}-{max(per):.1f}")
print(f"bigbatch / torchvision per worker: {med['bigbatch'] / med['torchvision']:.2f}x")
PY
