#!/usr/bin/env bash
# The main job end to end on the embedded defaults: record a real workload on a
# loop device with eBPF, inspect and validate the trace, convert it to Parquet.
# Every loop device it makes is released on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
IOTAPE=.venv/bin/iotape
OUT=${OUT:-out/demo}
mkdir -p "$OUT"

backing=$(mktemp -p /dev/shm iotape-demo-XXXXXX.img)
loop=""
cleanup() {
  [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
  rm -f "$backing"
}
trap cleanup EXIT
truncate -s 1G "$backing"
loop=$(losetup --find --show "$backing")
echo "== loop device $loop over $backing"

echo "== recording a mixed fio workload (4k random reads, 32k random writes, 256k sequential reads)"
$IOTAPE record -d "$loop" -o "$OUT/demo.iot" --force --meta demo=true -- \
  fio --output-format=terse --direct=1 --ioengine=io_uring --filename="$loop" --time_based --runtime=5 \
      --name=db-read --rw=randread --bs=4k --iodepth=8 --rate_iops=2000 \
      --name=db-write --rw=randwrite --bs=32k --iodepth=4 --rate_iops=500 \
      --name=scan --rw=read --bs=256k --iodepth=1 --rate_iops=100 --offset=512m > /dev/null

echo "== trace info"
$IOTAPE trace info "$OUT/demo.iot"
echo "== trace check"
$IOTAPE trace check "$OUT/demo.iot"
echo "== convert to Parquet"
$IOTAPE trace convert "$OUT/demo.iot" -o "$OUT/demo.parquet" --force
.venv/bin/python - "$OUT/demo.parquet" <<'PY'
import sys
import pyarrow.compute as pc
import pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
lat = pc.subtract(t["ts_complete_ns"], t["ts_issue_ns"])
print(f"{t.num_rows:,} requests; device latency p50 "
      f"{pc.quantile(lat, 0.5)[0].as_py() / 1e3:.1f} us, p99 {pc.quantile(lat, 0.99)[0].as_py() / 1e3:.1f} us")
PY
echo "== ingest into the embedded store (DuckDB)"
export IOTAPE_DB="$OUT/iotape.duckdb"
$IOTAPE ingest "$OUT/demo.iot" --name "demo-$(date +%Y%m%d-%H%M%S)" --tag source=demo
$IOTAPE runs list
echo "== done: $OUT/demo.iot, $OUT/demo.parquet, $IOTAPE_DB"
