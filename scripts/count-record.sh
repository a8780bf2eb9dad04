#!/usr/bin/env bash
# Record mode's cost counted in instructions, not seconds: the fan-out
# service of BenchmarkFanOutRatio runs under callgrind with the agent off,
# recording 100% and recording 1%, and serves N and then 2N keep-alive
# requests in each mode (a fresh process each time). The difference between
# the two runs of a mode, over N, is its instructions per request without
# start-up; the same for the agent off, subtracted, is what recording adds.
#
# Read it with care. Totals move by several percent run to run (threads
# interleave differently, the collector runs at other moments), which at
# 1% sampling is larger than the agent's cost. Under valgrind a request
# takes ~50 times as long, so work done per unit of time (the recorder's
# writer waking every 20 ms, the scheduler's idle spinning) weighs far more
# per request than in production. A function's own count per request
# repeats closely, so the script lists the functions whose own count grew
# most at 100%: that is what it is for, comparing a code path before and
# after a change.
#
#   scripts/count-record.sh          N=100 (about a minute)
#   scripts/count-record.sh 200
#   KEEP=1 scripts/count-record.sh   keeps the callgrind outputs (for
#                                    callgrind_annotate) and says where
#
# Needs valgrind and curl, and the Redis and MariaDB of the tests:
# RETRACE_TEST_REDIS and RETRACE_TEST_MYSQL as for `go test`
# (docs/recording.md). Kernel time is not counted: system calls are the same
# in every mode (BenchmarkFanOutRatio's reads/req and writes/req).
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=count-record
. scripts/measure.sh

N=${1:-100}
if ! [[ "$N" =~ ^[1-9][0-9]*$ ]]; then
	echo "count-record: N must be a positive number; got $N" >&2
	exit 2
fi
need_tools "valgrind curl" valgrind callgrind_annotate curl
need_test_dbs

work=$(mktemp -d /tmp/retrace-count-record.XXXXXX)
echo_pid=
cleanup() {
	if [ -n "$echo_pid" ]; then kill "$echo_pid" 2>/dev/null || true; fi
	if [ -z "${KEEP:-}" ]; then rm -rf "$work"; else echo "kept $work" >&2; fi
}
trap cleanup EXIT

# Without cgo: valgrind does not follow the cgo runtime's thread start-up.
CGO_ENABLED=0 go test -c -o "$work/capture.test" ./recording/capture/

# The HTTP downstream, natively, for all runs.
mkfifo "$work/echo.in"
CAPTURE_TEST_CHILD=echo "$work/capture.test" -test.run='^$' <"$work/echo.in" >"$work/echo.out" &
echo_pid=$!
exec 7>"$work/echo.in"
for _ in $(seq 100); do [ -s "$work/echo.out" ] && break; sleep 0.1; done
echo_addr=$(head -1 "$work/echo.out")

# run MODE COUNT: one service process under callgrind serving COUNT requests.
run() {
	local mode=$1 count=$2 out=$work/$1-$2
	local env=(CAPTURE_TEST_CHILD=fanout CAPTURE_TEST_DOWN="http://$echo_addr"
		GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1)
	case $mode in
	100) env+=(RETRACE_MODE=record RETRACE_RECORD="file://$out.rec" RETRACE_SAMPLE=1) ;;
	1) env+=(RETRACE_MODE=record RETRACE_RECORD="file://$out.rec" RETRACE_SAMPLE=0.01) ;;
	esac
	mkfifo "$out.in"
	env "${env[@]}" valgrind --tool=callgrind --smc-check=all --callgrind-out-file="$out.cg" \
		"$work/capture.test" -test.run='^$' <"$out.in" >"$out.stdout" 2>"$out.log" &
	local pid=$!
	exec 8>"$out.in"
	for _ in $(seq 600); do [ -s "$out.stdout" ] && break; sleep 0.1; done
	local addr urls=()
	addr=$(head -1 "$out.stdout")
	for i in $(seq "$count"); do urls+=("http://$addr/?id=cr$mode$count$i$RANDOM"); done
	printf '%s run of %d requests… ' "$mode" "$count" >&2
	curl -sf "${urls[@]}" >"$out.bodies" || {
		echo "requests failed; service log: $out.log" >&2
		exit 1
	}
	exec 8>&-
	wait "$pid" || {
		echo "service failed: $(cat "$out.stdout" "$out.log" | tail -5)" >&2
		exit 1
	}
	callgrind_annotate --inclusive=no --threshold=100 "$out.cg" >"$out.txt" 2>/dev/null
	grep -o 'Collected : [0-9]*' "$out.log" | awk '{print $3}' >"$out.total"
	echo "$(cat "$out.total") instructions" >&2
}

for mode in off 100 1; do
	run "$mode" "$N"
	run "$mode" $((2 * N))
done

per() { echo $((($(cat "$work/$1-$((2 * N)).total") - $(cat "$work/$1-$N.total")) / N)); }
off=$(per off)
printf '\ninstructions per request (user space, start-up excluded, N=%d)\n' "$N"
printf '  agent off       %9d\n' "$off"
for mode in 100 1; do
	m=$(per "$mode")
	awk -v m="$m" -v off="$off" -v mode="$mode%" \
		'BEGIN { printf "  recording %-4s %9d  (%+d, %+.1f%%)\n", mode, m, m - off, 100 * (m - off) / off }'
done

# growth MODE: each function's own instructions per request in MODE, less
# the agent off's
growth() {
	awk -v n="$N" '
		FNR == 1 { sect = 0; file++ }
		/file:function/ { sect = 1; next }
		sect == 1 && /^-+$/ { sect = 2; next }
		sect == 2 && (/^$/ || /^--/) { sect = 3 }
		sect == 2 {
			if (match($0, /^ *[0-9,]+ /) == 0) next
			count = substr($0, RSTART, RLENGTH); gsub(/[ ,]/, "", count)
			name = $0; sub(/^ *[0-9,]+ \([^)]*\) +/, "", name); sub(/ +\[[^]]*\] *$/, "", name)
			gsub(/\x27[0-9]+/, "", name); sub(/^[^:]*:/, "", name)
			# files: 1 off-N, 2 off-2N, 3 MODE-N, 4 MODE-2N
			sign = (file == 1 || file == 4) ? 1 : -1
			d[name] += sign * count
		}
		END { for (k in d) printf "%10.0f  %s\n", d[k] / n, k }
	' "$work/off-$N.txt" "$work/off-$((2 * N)).txt" "$work/$1-$N.txt" "$work/$1-$((2 * N)).txt"
}

printf '\nat 100%%, the functions whose own instructions grew most, per request\n'
growth 100 | sort -rn | awk 'NR <= 25' # reads it all: no SIGPIPE under pipefail

# At 1% the total is within the noise, but the agent's own functions are
# not: they show what a request that is not sampled costs.
printf '\nat 1%%, the agent'"'"'s own functions, per request\n'
growth 1 | grep retrace-dev/retrace/ | grep -v _test | sort -rn | awk '
	{ sum += $1 } NR <= 15 { print }
	END { printf "%10.0f  (all of the agent'"'"'s functions)\n", sum }'
