#!/usr/bin/env bash
# The users' story end to end on the embedded defaults (DuckDB):
#   1. the reference workload, briefly, recorded with eBPF on a loop device over /dev/shm;
#   2. the same trace replayed closed loop (`--timing dependent`: each request when
#      the ones it waits for completed, plus its think time) on an SSD-like device (a
#      loop over /dev/shm) and an HDD-like one (the project's disk model over FUSE),
#      each replay recorded at the device, their speed-up and latency side by side
#      (scripts/demo_devices.py);
#   3. all three traces ingested into DuckDB, tagged by device;
#   4. the Jetstress verdicts and the HDD-vs-SSD comparison, from the server's API,
#      and the recording vs both replays with `iotape compare` (a CI gate's exit code);
#   5. what an MSA-style SSD tier would have done for the HDD, from the HDD-like
#      replay that ran at the load the disk could take (closed loop: no overload);
#   6. the server, whose URL is printed (kept running when interactive or
#      DEMO_SERVE=1; Ctrl-C stops it).
# Every loop device, mount and process it makes is released on exit, also on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
IOTAPE=.venv/bin/iotape
PY=.venv/bin/python
OUT=${OUT:-out/demo}
PORT=${PORT:-8000}
# The HDD-like disk model's spindles (analyzer/lab/hdd.py: a 10K rpm disk each,
# about 7.5 ms a random request). The workload below issues about 200 I/O/s.
HDD_SPINDLES=${HDD_SPINDLES:-1}
rm -rf "$OUT"
mkdir -p "$OUT"
export IOTAPE_DB="$OUT/iotape.duckdb"

src_img=$(mktemp -p /dev/shm iotape-demo-src-XXXXXX.img)
src="" server="" devices=""
cleanup() {
  set +e
  # The device helper releases its own loop devices and FUSE mount on SIGTERM.
  if [ -n "$devices" ]; then kill "$devices" 2>/dev/null; wait "$devices" 2>/dev/null; fi
  if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; fi
  [ -n "$src" ] && losetup -d "$src"
  rm -f "$src_img"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
truncate -s 512M "$src_img"
src=$(losetup --find --show "$src_img")

echo "== 1. the reference workload for 10 s on $src (loop over /dev/shm), recorded"
wl=(--db-path "$src" --log-path "$src" --mailboxes 100 --mailbox-size-mb 4
  --iops-per-mailbox 1.0 --databases 1 --copies 2 --mode performance)
# The databases are created first, unrecorded: the trace is the steady load, not
# 400 MB of initial writes that no device would see again.
$IOTAPE workload run "${wl[@]}" --duration 1 --json > "$OUT/create.json"
$IOTAPE workload run "${wl[@]}" --duration 10 \
  --report "$OUT/workload.json" --html "$OUT/workload.html" \
  --record "$OUT/workload.iot" -d "$src" > "$OUT/workload.txt"
# The I/O rates per stream and the engine's own verdict; the rest is in workload.txt.
sed -n -e '/^transactional IOPS/p' -e '/^Background and total/,/└/p' -e '/^verdict/,$p' \
  "$OUT/workload.txt"

echo "== 2. the same trace replayed closed loop on an SSD-like and an HDD-like device, recorded"
# In the background so that the trap can stop it (SIGTERM) and so release its devices.
$PY scripts/demo_devices.py "$OUT/workload.iot" "$OUT" --spindles "$HDD_SPINDLES" &
devices=$!
wait "$devices"
devices=""

echo "== 3. ingest into DuckDB ($IOTAPE_DB)"
$IOTAPE ingest "$OUT/workload.iot" --name workload --tag source=demo --tag device=ram-loop
$IOTAPE ingest "$OUT/replay-hdd.iot" --name replay-hdd --tag source=demo --tag device=hdd-like
$IOTAPE ingest "$OUT/replay-ssd.iot" --name replay-ssd --tag source=demo --tag device=ssd-like
# The CLI needs the store while the server does not hold it yet.
$IOTAPE analyze tiering replay-hdd --policy tiering --preset msa \
  --fast-run replay-ssd --slow-run replay-hdd > "$OUT/tiering.txt"
# The recording and its two replays are one workload (the replays say what they
# replay): the gate judges the devices and exits 1, because the HDD-like one is far
# slower. The SSD-like replay measures a few microseconds more per request at the
# median than the engine's io_uring did (iotape-lanes' synchronous calls): under
# compare's default minimum effect (10 µs), so not a regression on a quiet machine.
rc=0
$IOTAPE compare workload replay-ssd replay-hdd --metric p50,p99 > "$OUT/compare.txt" || rc=$?

echo "== 4. Jetstress verdicts and the two devices compared (from the server's API)"
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


for run in ("workload", "replay-ssd", "replay-hdd"):
    v = get(f"/runs/{run}/verdict?mode=performance")
    print(f"{run}: {v['result'].upper()}" + (f" ({v['why']})" if v.get("why") else ""))
    for c in v["checks"]:
        if c["value"] is not None:
            mark = "ok" if c["pass"] else "OVER"
            print(f"  {c['check']:18s} {c['value']:9.3f}  limit {c['limit']:5g}  {mark}")

cmp = get("/compare?base=replay-ssd&candidate=replay-hdd")
print("\nthe same trace on two devices: device time, SSD-like -> HDD-like")
print(f"  {'op':6s} {'stream':21s} {'requests':>8s}  {'p50 ms SSD':>10s} {'HDD':>8s}  "
      f"{'p99 ms SSD':>10s} {'HDD':>8s}  HDD vs SSD")
for group in cmp["groups"]:
    for row in group["rows"]:
        p = {x["level"]: x for x in row["percentiles"]}
        p50, p99 = p["p50"], p["p99"]
        # slower/faster only where the bootstrap interval excludes no change.
        if row["regression"]:
            word = "slower"
        elif any(x["improvement"] for x in row["percentiles"]):
            word = "faster"
        elif p50["ci_low_ns"] is None:
            word = "too few requests to tell"
        else:
            word = "no clear difference"
        ratio = p50["candidate_ns"] / p50["base_ns"] if p50["base_ns"] else float("nan")
        print(f"  {row['op_name']:6s} {row['stream_name']:21s} {row['candidate_count']:8d}  "
              f"{p50['base_ns'] / 1e6:10.3f} {p50['candidate_ns'] / 1e6:8.3f}  "
              f"{p99['base_ns'] / 1e6:10.3f} {p99['candidate_ns'] / 1e6:8.3f}  "
              f"{word} (p50 x{ratio:.1f})")
PY

echo "== 4b. the same as a CI gate: iotape compare workload replay-ssd replay-hdd (exit $rc)"
# The first lines say the gate, its minimum effect included; then each candidate.
grep -E -A1 "^base " "$OUT/compare.txt" | head -2 || true
grep -E "^(replay-|  replay-)|regressions:" "$OUT/compare.txt" || true

echo "== 5. what an MSA-style SSD tier of 10 % of the footprint would have done for the HDD"
cat "$OUT/tiering.txt"
echo "(each request gets the latency its device showed for its op and size in the replays;"
echo " the HDD-like replay ran closed loop, at the load the disk could take, so its latencies"
echo " are the disk's own, not an overloaded queue's; the relief of moving load off it is"
echo " still not in the projection)"

echo "== 6. dashboard: http://127.0.0.1:$PORT/  (API docs: /docs)"
if [ -t 0 ] || [ "${DEMO_SERVE:-0}" = 1 ]; then
  echo "serving; Ctrl-C stops the server and releases the loop devices"
  wait "$server"
fi
