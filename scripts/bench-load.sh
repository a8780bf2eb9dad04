#!/usr/bin/env bash
# Load generator benchmark (issue 6): the highest sustained request rate and
# the generator's CPU per 1000 requests against a minimal local HTTP server,
# retrace side by side with vegeta in the same run; then the memory of
# retrace while it streams a 10-million-request file.
#
#   scripts/bench-load.sh             2 rounds of 10s per tool, then the 10M-line file
#   SECONDS_PER_TOOL=5 CONC=64 ROUNDS=3 BIG_LINES=1000000 scripts/bench-load.sh
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

# read_time FILE: user+sys seconds and max RSS (KiB) from /usr/bin/time -f.
read_time() { awk '{print $1+$2, $3}' "$1"; }

echo "GET $target/bench" >"$work/targets.txt"
# An input long enough for a run: the same request, one line each.
n_in=$((SECONDS_PER_TOOL * 60000))
awk -v n="$n_in" 'BEGIN{for(i=0;i<n;i++) print "{\"v\":1,\"at\":\"2026-11-29T10:00:00Z\",\"url\":\"/bench\"}"}' >"$work/requests.jsonl"

run_vegeta() { # round
	/usr/bin/time -f '%U %S %M' -o "$work/vegeta.time" taskset -c 1 "$work/vegeta" attack -targets="$work/targets.txt" \
		-rate=0 -max-workers="$CONC" -workers="$CONC" -duration="${SECONDS_PER_TOOL}s" -output="$work/vegeta.bin"
	"$work/vegeta" report -type=json "$work/vegeta.bin" >"$work/vegeta.json"
	read -r cpu rss < <(read_time "$work/vegeta.time")
	python3 -c '
import json,sys
r=json.load(open(sys.argv[1])); n=r["requests"]
print("%-8s %5s %10d %10.0f %14.1f %10.3f %10.3f %10.1f %8.4f" % ("vegeta", sys.argv[4], n, r["throughput"], float(sys.argv[2])*1e6/n,
    r["latencies"]["50th"]/1e6, r["latencies"]["99th"]/1e6, int(sys.argv[3])/1024, 1-r["success"]))
' "$work/vegeta.json" "$cpu" "$rss" "$1"
}

run_retrace() { # round
	rm -rf "$work/run"
	/usr/bin/time -f '%U %S %M' -o "$work/retrace.time" taskset -c 1 "$work/retrace" load --input "$work/requests.jsonl" \
		--target "$target" --mode max --concurrency "$CONC" --duration "${SECONDS_PER_TOOL}s" --progress off --out "$work/run" 2>"$work/retrace.log"
	"$work/retrace" analyze "$work/run" --format json >"$work/retrace.json"
	read -r cpu rss < <(read_time "$work/retrace.time")
	python3 -c '
import json,sys
t=json.load(open(sys.argv[1]))["total"]; n=t["count"]
print("%-8s %5s %10d %10.0f %14.1f %10.3f %10.3f %10.1f %8.4f" % ("retrace", sys.argv[4], n, t["rate"], float(sys.argv[2])*1e6/n,
    t["p50_ms"], t["p99_ms"], int(sys.argv[3])/1024, t["error_rate"]))
' "$work/retrace.json" "$cpu" "$rss" "$1"
}

# Alternate the tools so that both see the same (shared) machine.
printf '\n%-8s %5s %10s %10s %14s %10s %10s %10s %8s\n' tool round requests "req/s" "cpu-ms/1k req" "p50 ms" "p99 ms" "maxrss MB" "err"
for round in $(seq "${ROUNDS:-2}"); do
	run_vegeta "$round"
	run_retrace "$round"
done

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
echo "${BIG_LINES}-line file (${size} MB): ${sent} requests streamed in ${SECONDS_PER_TOOL}s; RSS per second (MB): ${samples[*]}"

log "streaming the whole file through retrace prepare (reader and writer of the format, no network)"
/usr/bin/time -f '%e %M' -o "$work/prep.time" "$work/retrace" prepare --in "$work/big.jsonl" --out /dev/null 2>"$work/prep.log"
read -r p_secs p_rss <"$work/prep.time"
echo "whole ${BIG_LINES}-line file through prepare: ${p_secs}s, max RSS $((p_rss / 1024)) MB ($(tail -1 "$work/prep.log"))"
