#!/usr/bin/env bash
# The whole mission end to end on the embedded defaults (DuckDB):
#   1. two loop devices over /dev/shm;
#   2. the reference workload, briefly, recorded with eBPF;
#   3. a replay scaled to twice the mailboxes on the second device, recorded too;
#   4. both traces ingested into DuckDB;
#   5. the verdicts and the comparison, from the server's API;
#   6. the server, whose URL is printed (kept running when interactive or
#      DEMO_SERVE=1; Ctrl-C stops it).
# Every loop device it makes, and the server, are released on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
IOTAPE=.venv/bin/iotape
PY=.venv/bin/python
OUT=${OUT:-out/demo}
PORT=${PORT:-8000}
rm -rf "$OUT"
mkdir -p "$OUT"
export IOTAPE_DB="$OUT/iotape.duckdb"

src_img=$(mktemp -p /dev/shm iotape-demo-src-XXXXXX.img)
dst_img=$(mktemp -p /dev/shm iotape-demo-dst-XXXXXX.img)
src="" dst="" server=""
cleanup() {
  set +e
  if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; fi
  [ -n "$src" ] && losetup -d "$src"
  [ -n "$dst" ] && losetup -d "$dst"
  rm -f "$src_img" "$dst_img"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
truncate -s 1G "$src_img" "$dst_img"
src=$(losetup --find --show "$src_img")
dst=$(losetup --find --show "$dst_img")
echo "== 1. loop devices: $src (workload), $dst (replay target)"

echo "== 2. the reference workload for 10 s, recorded"
$IOTAPE workload run --db-path "$src" --log-path "$src" --mailboxes 50 --mailbox-size-mb 8 \
  --iops-per-mailbox 0.5 --databases 1 --copies 2 --mode performance --duration 10 \
  --report "$OUT/workload.json" --html "$OUT/workload.html" \
  --record "$OUT/workload.iot" -d "$src"
$IOTAPE trace info "$OUT/workload.iot"

echo "== 3. a replay scaled to 100 mailboxes on $dst, recorded"
$IOTAPE replay plan "$OUT/workload.iot" -o "$OUT/replay" --mailboxes 100 --target "all=$dst"
$IOTAPE replay run "$OUT/replay" --record "$OUT/replay.iot"

echo "== 4. ingest into DuckDB ($IOTAPE_DB)"
$IOTAPE ingest "$OUT/workload.iot" --name workload --tag source=demo
$IOTAPE ingest "$OUT/replay.iot" --name replay-2x --tag source=demo
$IOTAPE runs list

echo "== 5. what an SSD read cache of 10 % of the data would have done for the workload"
$IOTAPE analyze tiering workload --policy lru --unit 32K

echo "== 6. verdicts and comparison"
$IOTAPE serve --port "$PORT" > "$OUT/server.log" 2>&1 &
server=$!
$PY - "$PORT" <<'PY'
import json
import sys
import time
import urllib.request

base = f"http://127.0.0.1:{sys.argv[1]}"


def get(path: str) -> dict:
    for _ in range(100):
        try:
            with urllib.request.urlopen(base + path, timeout=60) as r:
                return json.load(r)
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"demo: the server at {base} did not answer {path}")


for run in ("workload", "replay-2x"):
    v = get(f"/runs/{run}/verdict?mode=performance")
    print(f"{run}: {v['result'].upper()}" + (f" ({v['why']})" if v.get("why") else ""))
    for c in v["checks"]:
        if c["value"] is not None:
            print(f"  {c['check']:18s} {c['value']:10.3f}  limit {c['limit']}")
cmp = get("/compare?base=workload&candidate=replay-2x")
print("comparison workload -> replay-2x (p50 / p99 device time, per op and stream):")
for group in cmp["groups"]:
    for row in group.get("rows", []):
        p = {x["level"]: x for x in row["percentiles"]}
        flag = "REGRESSION" if row["regression"] else ""
        print(f"  {row['op_name']:6s} {row['stream_name']:12s} n={row['base_count']:>5}/"
              f"{row['candidate_count']:<5} p50 {p['p50']['delta_pct']:+7.1f} %  "
              f"p99 {p['p99']['delta_pct']:+7.1f} %  {flag}")
PY

echo "== 7. dashboard: http://127.0.0.1:$PORT/  (API docs: /docs)"
if [ -t 0 ] || [ "${DEMO_SERVE:-0}" = 1 ]; then
  echo "serving; Ctrl-C stops the server and releases the loop devices"
  wait "$server"
fi
