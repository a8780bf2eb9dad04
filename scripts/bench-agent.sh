#!/usr/bin/env bash
# Throughput cost of the agent: serves the same handler (one goroutine per
# request calling a raw-TCP downstream) with RETRACE_MODE=off and with
# RETRACE_MODE=replay (the downstream connection redirected to a
# frame-checking mock, every request traced) under the same loopback load
# for the same time, and prints the ratio replay/off (target >= 0.97).
#
#   scripts/bench-agent.sh                 5 s per side, 16 connections
#   DURATION=3s CONNS=8 scripts/bench-agent.sh
#
# Each side runs ROUNDS (default 2) alternating slices of DURATION/ROUNDS,
# so drift of a shared machine hits both sides alike. DURATION is at most
# 10s per side.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
CONNS=${CONNS:-16}
ROUNDS=${ROUNDS:-2}
secs=${DURATION%s}
if ! [[ "$secs" =~ ^[0-9]+(\.[0-9]+)?$ ]] || awk -v s="$secs" 'BEGIN{exit !(s > 10 || s <= 0)}'; then
	echo "bench-agent: DURATION must be a number of seconds in (0, 10], like 5s; got $DURATION" >&2
	exit 2
fi
slice=$(awk -v s="$secs" -v r="$ROUNDS" 'BEGIN{printf "%.3fs", s / r}')

work=$(mktemp -d /tmp/retrace-bench.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

waitfile() {
	for _ in $(seq 100); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	echo "bench-agent: $2 did not start" >&2
	exit 1
}

go build -o "$work/benchserver" ./internal/agenttest/benchserver
go build -o "$work/benchload" ./internal/agenttest/benchload

"$work/benchload" downstream -ready "$work/down" >"$work/down.log" 2>&1 &
down_pid=$!
pids+=("$down_pid")
waitfile "$work/down" "downstream"
read -r line mock <"$work/down" || true # no trailing newline

# run MODE: serve in MODE for one slice, print the requests completed.
run() {
	local mode=$1 ready="$work/sut-$1-$RANDOM"
	RETRACE_MODE=$mode RETRACE_MOCK_ADDR=$mock "$work/benchserver" -line "$line" -ready "$ready" \
		>"$work/sut.log" 2>&1 &
	local pid=$!
	waitfile "$ready" "benchserver ($mode)"
	local out
	out=$("$work/benchload" load -target "$(cat "$ready")" -duration "$slice" -conns "$CONNS")
	kill "$pid"
	wait "$pid" || { echo "bench-agent: benchserver ($mode) failed:"; cat "$work/sut.log"; } >&2
	echo "$out" >&2
	awk '{print $2}' <<<"$out"
}

off=0
replay=0
for _ in $(seq "$ROUNDS"); do
	off=$((off + $(run off)))
	replay=$((replay + $(run replay)))
done
kill "$down_pid"
wait "$down_pid" || true
cat "$work/down.log"

awk -v off="$off" -v replay="$replay" -v d="$secs" -v c="$CONNS" 'BEGIN {
	printf "agent off:    %d requests in %ss (%.0f/s)\n", off, d, off / d
	printf "agent replay: %d requests in %ss (%.0f/s)\n", replay, d, replay / d
	printf "throughput ratio replay/off: %.3f (target >= 0.97; %d connections, loopback)\n", replay / off, c
}'
