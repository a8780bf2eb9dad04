#!/usr/bin/env bash
# Load generator benchmark (issue 6): the highest sustained request rate and
# the generator's CPU per 1000 requests against a minimal local HTTP server,
# retrace side by side with vegeta in the same run; then the memory of
# retrace while it streams a 10-million-request file.
#
#   scripts/bench-load.sh             ~10s per tool + the 10M-line file
#   SECONDS_PER_TOOL=5 CONC=64 scripts/bench-load.sh
#
# Everything runs on loopback; every process started here is stopped on exit.
# vegeta is built from the Go module proxy into the scratch directory: it is
# not a dependency of the module.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
SECONDS_PER_TOOL=${SECONDS_PER_TOOL:-10}
CONC=${CONC:-32}
BIG_LINES=${BIG_LINES:-10000000}
VEGETA=github.com/tsenart/vegeta/v12@v12.13.0
work=$(mktemp -d /tmp/retrace-bench-load.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
log() { printf '==> %s\n' "$*" >&2; }

log "building retrace, the bench server and vegeta ($VEGETA)"
go build -o "$work/retrace" ./cmd/retrace
go build -o "$work/benchserver" ./replayer/load/internal/benchserver
(cd "$work" && GOFLAGS= GOBIN="$work" go install "$VEGETA")

# The server gets one core, the generators the other, so that the two do
# not fight over the same core and the comparison is about the generator.
taskset -c 0 "$work/benchserver" >"$work/addr" &
pids+=($!)
for _ in $(seq 50); do [ -s "$work/addr" ] && break; sleep 0.1; done
addr=$(head -1 "$work/addr")
target="http://$addr"
log "bench server on $target (core 0); generators on core 1, $CONC connections, ${SECONDS_PER_TOOL}s each"

# cpu_of FILE: user+sys seconds and max RSS (KiB) from /usr/bin/time -f.
read_time() { awk '{print $1+$2, $3}' "$1"; }

# --- vegeta -----------------------------------------------------------------
echo "GET $target/bench" >"$work/targets.txt"
/usr/bin/time -f '%U %S %M' -o "$work/vegeta.time" taskset -c 1 "$work/vegeta" attack -targets="$work/targets.txt" \
	-rate=0 -max-workers="$CONC" -workers="$CONC" -duration="${SECONDS_PER_TOOL}s" -output="$work/vegeta.bin"
"$work/vegeta" report -type=json "$work/vegeta.bin" >"$work/vegeta.json"
read -r v_cpu v_rss < <(read_time "$work/vegeta.time")
read -r v_n v_rate v_p50 v_p99 v_ok < <(python3 -c '
import json,sys
r=json.load(open(sys.argv[1]))
print(r["requests"], "%.0f" % r["throughput"], "%.3f" % (r["latencies"]["50th"]/1e6), "%.3f" % (r["latencies"]["99th"]/1e6), "%.4f" % r["success"])
' "$work/vegeta.json")

# --- retrace ----------------------------------------------------------------
# An input long enough for the run: the same request, one line each.
n_in=$((SECONDS_PER_TOOL * 60000))
awk -v n="$n_in" 'BEGIN{for(i=0;i<n;i++) print "{\"v\":1,\"at\":\"2026-11-29T10:00:00Z\",\"url\":\"/bench\"}"}' >"$work/requests.jsonl"
/usr/bin/time -f '%U %S %M' -o "$work/retrace.time" taskset -c 1 "$work/retrace" load --input "$work/requests.jsonl" \
	--target "$target" --mode max --concurrency "$CONC" --duration "${SECONDS_PER_TOOL}s" --progress off --out "$work/run" 2>"$work/retrace.log"
"$work/retrace" analyze "$work/run" --format json >"$work/retrace.json"
read -r r_cpu r_rss < <(read_time "$work/retrace.time")
read -r r_n r_rate r_p50 r_p99 r_err < <(python3 -c '
import json,sys
t=json.load(open(sys.argv[1]))["total"]
print(t["count"], "%.0f" % t["rate"], "%.3f" % t["p50_ms"], "%.3f" % t["p99_ms"], t["errors"])
' "$work/retrace.json")

printf '\n%-8s %10s %10s %14s %10s %10s %10s\n' tool requests "req/s" "cpu-ms/1k req" "p50 ms" "p99 ms" "maxrss MB"
awk -v t=vegeta -v n="$v_n" -v r="$v_rate" -v c="$v_cpu" -v a="$v_p50" -v b="$v_p99" -v m="$v_rss" \
	'BEGIN{printf "%-8s %10d %10d %14.1f %10s %10s %10.1f\n", t, n, r, c*1e6/n, a, b, m/1024}'
awk -v t=retrace -v n="$r_n" -v r="$r_rate" -v c="$r_cpu" -v a="$r_p50" -v b="$r_p99" -v m="$r_rss" \
	'BEGIN{printf "%-8s %10d %10d %14.1f %10s %10s %10.1f\n", t, n, r, c*1e6/n, a, b, m/1024}'
echo "(vegeta success ratio $v_ok; retrace errors $r_err)"

# --- memory on a 10M-request file -------------------------------------------
log "writing a $BIG_LINES-line input (distinct URLs and bodies)"
awk -v n="$BIG_LINES" 'BEGIN{for(i=0;i<n;i++) printf "{\"v\":1,\"at\":\"2026-11-29T10:%02d:%02dZ\",\"method\":\"POST\",\"url\":\"/orders/%d?page=%d\",\"header\":{\"Content-Type\":[\"application/json\"]},\"body\":\"{\\\"item\\\":%d}\"}\n", (i/60000)%60, (i/1000)%60, i, i%7, i}' >"$work/big.jsonl"
size=$(du -m "$work/big.jsonl" | cut -f1)
log "streaming it through retrace load --mode max for ${SECONDS_PER_TOOL}s (${size} MB file); RSS sampled every second"
taskset -c 1 "$work/retrace" load --input "$work/big.jsonl" --target "$target" --mode max --concurrency "$CONC" \
	--duration "${SECONDS_PER_TOOL}s" --progress off --out "$work/big" 2>"$work/big.log" &
lp=$!
pids+=($lp)
samples=()
while kill -0 "$lp" 2>/dev/null; do
	rss=$(awk '/VmRSS/{print int($2/1024)}' "/proc/$lp/status" 2>/dev/null || true)
	[ -n "$rss" ] && samples+=("$rss")
	sleep 1
done
wait "$lp" || true
sent=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sent"])' "$work/big/shard-0-of-1/results.json")
echo
echo "10M-line file (${size} MB): ${sent} requests streamed in ${SECONDS_PER_TOOL}s; RSS per second (MB): ${samples[*]}"

log "streaming the whole file through retrace prepare (reader and writer of the format, no network)"
/usr/bin/time -f '%e %M' -o "$work/prep.time" "$work/retrace" prepare --in "$work/big.jsonl" --out /dev/null 2>"$work/prep.log"
read -r p_secs p_rss <"$work/prep.time"
echo "whole 10M-line file through prepare: ${p_secs}s, max RSS $((p_rss / 1024)) MB ($(tail -1 "$work/prep.log"))"
