#!/usr/bin/env bash
# Where record mode's CPU goes, function by function, from `perf record -e
# cpu-clock` (a software clock: no hardware counters needed, so it works in
# a VM). The fan-out service of BenchmarkFanOutRatio runs with the agent off
# and recording, in turns, ROUNDS times each, every run serving 8 keep-alive
# clients (curl) REQS requests each after a warm-up, profiled at 10 kHz.
# Sample counts of all runs of a mode are added up, then compared with the
# agent off:
#
#   - the extra samples, in groups: the agent's own functions (the hooks,
#     the trace package, the recorder, the encoder), the allocator, the
#     collector, goroutine stack growth, the rest of the runtime, the
#     kernel and the rest of user space;
#   - the agent's costliest functions, each with its share of the agent's
#     samples.
#
# Samples land where the time goes, cache misses included; `perf annotate
# -i DIR/perf.data-MODE-RUN -s FUNCTION` (KEEP=1) shows on which
# instruction. perf's own interrupts slow everything down, the kernel most,
# so compare groups and functions between modes and builds, not the
# totals with BenchmarkFanOutRatio's figures. Runs of one mode move by a
# few percent with the machine; the agent's functions much less.
#
#   scripts/perf-record.sh                 recording 100%, 3 rounds of 8 x 500 requests
#   scripts/perf-record.sh 0.01 5 1000     recording 1%, 5 rounds of 8 x 1000
#   KEEP=1 scripts/perf-record.sh          keeps the profiles and says where
#   TLS=1 scripts/perf-record.sh           the HTTP downstream over HTTPS (a CA
#                                          made with openssl for the run)
#
# Needs perf (Debian: linux-perf), curl, and the Redis and MariaDB of the
# tests: RETRACE_TEST_REDIS and RETRACE_TEST_MYSQL as for `go test`
# (docs/recording.md).
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=perf-record
. scripts/measure.sh

RATE=${1:-1}
ROUNDS=${2:-3}
REQS=${3:-500}
for n in "$ROUNDS" "$REQS"; do
	if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
		echo "perf-record: ROUNDS and REQS must be positive numbers; got $n" >&2
		exit 2
	fi
done
if ! [[ "$RATE" =~ ^(1|0?\.[0-9]+)$ ]]; then
	echo "perf-record: RATE must be a sampling rate in (0, 1]; got $RATE" >&2
	exit 2
fi
need_tools "linux-perf curl" perf curl
if [ -n "${TLS:-}" ]; then need_tools openssl openssl; fi
need_test_dbs

work=$(mktemp -d /tmp/retrace-perf-record.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	if [ -z "${KEEP:-}" ]; then rm -rf "$work"; else echo "kept $work" >&2; fi
}
trap cleanup EXIT

go test -c -o "$work/capture.test" ./recording/capture/

# TLS=1: a CA and a certificate for 127.0.0.1, the downstream's
scheme=http echo_env=() tls_env=()
if [ -n "${TLS:-}" ]; then
	(cd "$work" &&
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=perf-ca \
			-keyout ca.key -out ca.pem 2>/dev/null &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
			-keyout leaf.key -out leaf.csr 2>/dev/null &&
		printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >leaf.ext &&
		openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile leaf.ext \
			-out leaf.pem 2>/dev/null)
	scheme=https echo_env=(CAPTURE_TEST_ECHO_CERT="$work/leaf.pem" CAPTURE_TEST_ECHO_KEY="$work/leaf.key")
	tls_env=(CAPTURE_TEST_DOWN_CA="$work/ca.pem")
fi

# The HTTP downstream, for all runs; its standard input stays open (fd 7)
# until the script ends.
mkfifo "$work/echo.in"
env ${echo_env[@]+"${echo_env[@]}"} CAPTURE_TEST_CHILD=echo "$work/capture.test" -test.run='^$' <"$work/echo.in" >"$work/echo.out" &
pids+=($!)
exec 7>"$work/echo.in"
for _ in $(seq 100); do [ -s "$work/echo.out" ] && break; sleep 0.1; done
echo_addr=$(head -1 "$work/echo.out")

# send ADDR PREFIX N: 8 clients, N requests each, on keep-alive connections
send() {
	local addr=$1 prefix=$2 n=$3 c jobs=()
	for c in 1 2 3 4 5 6 7 8; do
		local urls=() i
		for i in $(seq "$n"); do urls+=("http://$addr/?id=$prefix$c-$i-$RANDOM"); done
		curl -sf "${urls[@]}" >/dev/null &
		jobs+=($!)
	done
	for c in "${jobs[@]}"; do wait "$c" || {
		echo "perf-record: requests failed" >&2
		exit 1
	}; done
}

# run MODE RUN: one service process, warmed up, then profiled
run() {
	local mode=$1 k=$2 out=$work/$1-$2
	local env=(CAPTURE_TEST_CHILD=fanout CAPTURE_TEST_DOWN="$scheme://$echo_addr" ${tls_env[@]+"${tls_env[@]}"})
	if [ "$mode" != off ]; then
		env+=(RETRACE_MODE=record RETRACE_RECORD="file://$out.rec" RETRACE_SAMPLE="$RATE")
	fi
	mkfifo "$out.in"
	env "${env[@]}" "$work/capture.test" -test.run='^$' <"$out.in" >"$out.stdout" 2>"$out.log" &
	local pid=$!
	exec 8>"$out.in"
	for _ in $(seq 600); do [ -s "$out.stdout" ] && break; sleep 0.1; done
	local addr
	addr=$(head -1 "$out.stdout")
	send "$addr" warm 50
	perf record -q -e cpu-clock -F 10000 -p "$pid" -o "$work/perf.data-$mode-$k" 2>/dev/null &
	local perf_pid=$!
	sleep 0.5 # perf attached
	local start end
	start=$(date +%s%N)
	send "$addr" "p$mode$k-" "$REQS"
	end=$(date +%s%N)
	kill -INT "$perf_pid"
	wait "$perf_pid" || true
	exec 8>&-
	wait "$pid" || {
		echo "perf-record: service failed: $(tail -5 "$out.stdout" "$out.log")" >&2
		exit 1
	}
	printf '%-4s run %d: %d requests in %d ms\n' "$mode" "$k" $((8 * REQS)) $(((end - start) / 1000000)) >&2
	perf report -i "$work/perf.data-$mode-$k" --no-children --sort sym -g none --percent-limit 0 \
		-F sample,sym 2>/dev/null | grep -v '^#' | grep -v '^$' >"$work/$mode-$k.flat" || true
}

for k in $(seq "$ROUNDS"); do
	run off "$k"
	run rec "$k"
done

cat "$work"/off-*.flat | sed 's/^/off /' >"$work/all"
cat "$work"/rec-*.flat | sed 's/^/rec /' >>"$work/all"
awk -v reqs=$((8 * REQS * ROUNDS)) -v rate="$RATE" '
	function group(space, sym) {
		if (space == "[k]") return "kernel"
		if (sym ~ /retrace-dev\/retrace\// && sym !~ /capture_test/ || sym ~ /segmentio/) return "agent"
		if (sym ~ /^runtime\.(mallocgc|newobject|makeslice|growslice|memclr|nextFree)|\(\*mspan\)|heapBits/) return "allocator"
		if (sym ~ /^runtime\.(gcDrain|scanobject|scanObject|greyobject|markBits|findObject|gcBgMark|scanstack|scanframe|.*sweep|wbBuf|gcmark|typePointers|tryDeferToSpanScan|markroot|gcWriteBarrier|bulkBarrier)/) return "collector"
		if (sym ~ /^runtime\.(step|findfunc|pcvalue|adjust|getStackMap|\(\*unwinder\)|funcMaxSPDelta|\(\*moduledata\)\.textAddr|copystack|newstack|funcdata|pcdatavalue|stackalloc|stackfree|readvarint|stackpool|funcspdelta|\(\*stkframe\))/) return "stack growth"
		if (sym ~ /^runtime\./) return "runtime, other"
		return "user, other"
	}
	{
		mode = $1; n = $2; space = $3
		sym = $0; sub(/^[a-z]+ +[0-9]+ +\[.\] +/, "", sym)
		tot[mode] += n
		g = group(space, sym)
		grp[mode, g] += n
		if (g == "agent" && mode == "rec") { fn[sym] += n; agent += n }
	}
	END {
		printf "\nsamples of 0.1 ms per request, %d requests per mode (recording at %s)\n", reqs, rate
		printf "  %-16s %8s %8s %8s\n", "", "off", "rec", "extra"
		n = split("agent|allocator|collector|stack growth|runtime, other|kernel|user, other", order, "|")
		for (i = 1; i <= n; i++) {
			g = order[i]
			printf "  %-16s %8.2f %8.2f %+8.2f\n", g, grp["off", g] / reqs, grp["rec", g] / reqs, (grp["rec", g] - grp["off", g]) / reqs
		}
		printf "  %-16s %8.2f %8.2f %+8.2f (%+.1f%%)\n", "total", tot["off"] / reqs, tot["rec"] / reqs, (tot["rec"] - tot["off"]) / reqs, 100 * (tot["rec"] / tot["off"] - 1)
		printf "\nthe agent'"'"'s costliest functions (share of its %d samples)\n", agent
		for (s in fn) printf "%d\t%s\n", fn[s], s >fnfile
	}' fnfile="$work/fn" "$work/all"
sort -rn "$work/fn" | head -30 | awk -F '\t' -v total="$(awk -F '\t' '{ s += $1 } END { print s }' "$work/fn")" \
	'{ printf "  %5.1f%%  %s\n", 100 * $1 / total, $2 }'
