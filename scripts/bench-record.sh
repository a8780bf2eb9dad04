#!/usr/bin/env bash
# Record-mode cost, over several runs of BenchmarkFanOutRatio (the example
# fan-out service with the agent off, recording 100% and recording 1%, side
# by side; see docs/recording.md#record-mode-overhead). With a git revision,
# the revision's build and the working tree's alternate run by run, so that
# a change's effect is measured against its baseline in the same session of
# the same machine. The revision's build runs the working tree's benchmark
# (recording/capture/record_test.go) when it builds there.
#
#   scripts/bench-record.sh              6 runs of the working tree
#   scripts/bench-record.sh 8 HEAD~1     8 runs each, HEAD~1 and the working tree
#   CAPTURE_BENCH_TLS=1 scripts/bench-record.sh 5 main
#                                        the HTTP downstream over HTTPS (docs/recording.md#https-fan-out-record-mode-cost)
#
# Needs the Redis and MariaDB of the tests: RETRACE_TEST_REDIS and
# RETRACE_TEST_MYSQL as for `go test` (docs/recording.md). One run takes
# about 20 s. It prints each run's ratios to the agent off (throughput, and
# CPU per request off over mode), then their mean, standard deviation and
# median per build; a single run's ratio moves by about ±5% on a busy 2-core VM.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=bench-record
. scripts/measure.sh

RUNS=${1:-6}
BASE=${2:-}
if ! [[ "$RUNS" =~ ^[1-9][0-9]*$ ]]; then
	echo "bench-record: RUNS must be a positive number; got $RUNS" >&2
	exit 2
fi
need_test_dbs

work=$(mktemp -d /tmp/retrace-bench-record.XXXXXX)
cleanup() {
	if [ -d "$work/base" ]; then git worktree remove --force "$work/base" >/dev/null 2>&1 || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

builds=(tree)
go test -c -o "$work/tree.test" ./recording/capture/
if [ -n "$BASE" ]; then
	rev=$(git rev-parse --verify --quiet "$BASE^{commit}") || {
		echo "bench-record: $BASE is not a git revision" >&2
		exit 2
	}
	git worktree add --detach "$work/base" "$rev" >/dev/null 2>&1
	# The revision's agent, measured by the working tree's benchmark, so
	# that a change to the benchmark does not pass for one of the agent;
	# the revision's own benchmark if the tree's does not build there.
	cp recording/capture/record_test.go "$work/base/recording/capture/record_test.go"
	if ! (cd "$work/base" && go test -c -o "$work/base.test" ./recording/capture/ 2>/dev/null); then
		echo "bench-record: the working tree's benchmark does not build at $BASE; using $BASE's own" >&2
		(cd "$work/base" && git checkout -q -- recording/capture/record_test.go && go test -c -o "$work/base.test" ./recording/capture/)
	fi
	builds=(base tree)
fi

for i in $(seq "$RUNS"); do
	for b in "${builds[@]}"; do
		printf '%s run %d/%d: ' "$b" "$i" "$RUNS" >&2
		(cd recording/capture && "$work/$b.test" -test.run '^$' -test.bench 'FanOutRatio$' -test.benchtime 1x >"$work/out" 2>&1) || true
		line=$(grep '^BenchmarkFanOutRatio' "$work/out" || true)
		if [ -z "$line" ] || grep -q -- '--- FAIL' "$work/out"; then
			echo "failed:" >&2
			tail -20 "$work/out" >&2
			exit 1
		fi
		echo "$line" | tr '\t' '\n' | awk -v b="$b" '
			$2 == "ratio-100%" || $2 == "ratio-1%" || $2 == "cpu-ratio-100%" || $2 == "cpu-ratio-1%" { m[$2] = $1 }
			END { printf "%s ratio-100%%=%s ratio-1%%=%s cpu-ratio-100%%=%s cpu-ratio-1%%=%s\n", b, m["ratio-100%"], m["ratio-1%"], m["cpu-ratio-100%"], m["cpu-ratio-1%"] }' |
			tee -a "$work/runs" >&2
	done
done

echo
# per build and ratio: mean, standard deviation, and the median, which one
# run slowed by the machine (it happens) does not move
awk '{
	for (i = 2; i <= NF; i++) {
		split($i, kv, "=")
		k = $1 " " kv[1]; n[k]++; s[k] += kv[2]; q[k] += kv[2] * kv[2]; v[k, n[k]] = kv[2]
	}
} END {
	for (k in n) {
		mean = s[k] / n[k]
		sd = n[k] > 1 ? sqrt((q[k] - n[k] * mean * mean) / (n[k] - 1)) : 0
		m = n[k]
		for (i = 1; i <= m; i++) a[i] = v[k, i] + 0
		for (i = 2; i <= m; i++) { # insertion sort: a few dozen runs
			x = a[i]
			for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
			a[j + 1] = x
		}
		med = m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
		printf "%-24s mean %.3f  sd %.3f  median %.3f  (%d runs)\n", k, mean, sd, med, m
	}
}' "$work/runs" | sort
