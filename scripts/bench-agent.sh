#!/usr/bin/env bash
# Throughput cost of the agent: serves the same handler (one goroutine per
# request calling a raw-TCP downstream) with RETRACE_MODE=off and with
# RETRACE_MODE=replay (the downstream connection redirected to a
# frame-checking mock, every request traced) under the same loopback load
# for the same time, and prints the ratio replay/off (target >= 0.97).
#
#   scripts/bench-agent.sh                 5 s per side, 16 connections
#   DURATION=3s CONNS=8 scripts/bench-agent.sh
#   TLS=1 scripts/bench-agent.sh           the downstream over TLS (replay: no TLS, plaintext frames to the mock)
#
# Each side runs ROUNDS (default 2) alternating slices of DURATION/ROUNDS,
# so drift of a shared machine hits both sides alike. DURATION is at most
# 10s per side. On a machine busy with other work the throughput ratio is
# noisy; the service's CPU time per request (user+system, from /proc), also
# printed, is the steadier measure of what the agent costs.
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

tlsflags=() lineflags=()
if [ -n "${TLS:-}" ]; then
	tlsflags=(-tls "$work") lineflags=(-line-ca "$work/ca.pem")
fi
"$work/benchload" downstream -ready "$work/down" "${tlsflags[@]}" >"$work/down.log" 2>&1 &
down_pid=$!
pids+=("$down_pid")
waitfile "$work/down" "downstream"
read -r line mock <"$work/down" || true # no trailing newline

tck=$(getconf CLK_TCK)
# cpu PID: user+system CPU ticks the process used so far.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run MODE: serve in MODE for one slice, print the requests completed and
# the service's CPU ticks.
run() {
	local mode=$1 ready="$work/sut-$1-$RANDOM"
	RETRACE_MODE=$mode RETRACE_MOCK_ADDR=$mock "$work/benchserver" -line "$line" "${lineflags[@]}" -ready "$ready" \
		>"$work/sut.log" 2>&1 &
	local pid=$!
	waitfile "$ready" "benchserver ($mode)"
	local out d0 d1
	d0=$(cpu "$down_pid")
	out=$("$work/benchload" load -target "$(cat "$ready")" -duration "$slice" -conns "$CONNS")
	local ticks
	ticks=$(cpu "$pid")
	d1=$(cpu "$down_pid")
	kill "$pid"
	wait "$pid" || { echo "bench-agent: benchserver ($mode) failed:"; cat "$work/sut.log"; } >&2
	echo "$mode: $out cpu-ticks $ticks downstream-ticks $((d1 - d0))" >&2
	echo "$(awk '{print $2}' <<<"$out") $ticks $((d1 - d0))"
}

off=0 replay=0 offcpu=0 replaycpu=0 offdown=0 replaydown=0
for _ in $(seq "$ROUNDS"); do
	read -r n c dc < <(run off)
	off=$((off + n)) offcpu=$((offcpu + c)) offdown=$((offdown + dc))
	read -r n c dc < <(run replay)
	replay=$((replay + n)) replaycpu=$((replaycpu + c)) replaydown=$((replaydown + dc))
done
kill "$down_pid"
wait "$down_pid" || true
cat "$work/down.log"

awk -v off="$off" -v replay="$replay" -v d="$secs" -v c="$CONNS" -v oc="$offcpu" -v rc="$replaycpu" -v tck="$tck" \
	-v od="$offdown" -v rd="$replaydown" 'BEGIN {
	ou = oc / tck / off * 1e6; ru = rc / tck / replay * 1e6
	odu = od / tck / off * 1e6; rdu = rd / tck / replay * 1e6
	printf "agent off:    %d requests in %ss (%.0f/s), service CPU %.1f us/request, downstream (line server) %.1f us/request\n", off, d, off / d, ou, odu
	printf "agent replay: %d requests in %ss (%.0f/s), service CPU %.1f us/request, downstream (mock) %.1f us/request\n", replay, d, replay / d, ru, rdu
	printf "service CPU per request replay/off: %.3f\n", ru / ou
	printf "throughput ratio replay/off: %.3f (target >= 0.97; %d connections, loopback)\n", replay / off, c
}'
