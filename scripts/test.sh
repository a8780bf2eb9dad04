#!/usr/bin/env bash
# The one test command (README): installs what the tests need when it is
# missing, starts redis-server and mariadb on loopback ports, runs the
# linters and every test, and stops what it started.
#
#   scripts/test.sh            everything
#   scripts/test.sh ./trace/   only these packages (linters still run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

REDIS_PORT=${REDIS_PORT:-16379}
MYSQL_PORT=${MYSQL_PORT:-13306}
work=$(mktemp -d /tmp/retrace-test.XXXXXX)
export PATH="$(go env GOPATH)/bin:$PATH"

log() { printf '==> %s (at %ds)\n' "$*" "$SECONDS"; }

# Debian packages install in the background while the linters compile: on
# a fresh machine the download and the compiler then overlap.
install_packages() {
	local need=()
	command -v redis-server >/dev/null || need+=(redis-server)
	command -v mariadbd >/dev/null || need+=(mariadb-server)
	command -v chromium >/dev/null || need+=(chromium)
	command -v curl >/dev/null || need+=(curl) # the README walkthrough (e2e) uses it
	if [ "$(uname -m)" = x86_64 ]; then
		# runs the agent's tests built for arm64
		command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
	fi
	[ ${#need[@]} -gt 0 ] || return 0
	log "installing ${need[*]} (in the background, log in $work/apt.log)"
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	(
		$sudo apt-get update -qq &&
			$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
	) >"$work/apt.log" 2>&1 &
	apt_pid=$!
}

wait_packages() {
	[ -n "${apt_pid:-}" ] || return 0
	log "waiting for the package installs"
	if ! wait "$apt_pid"; then
		cat "$work/apt.log"
		echo "installing packages failed"
		exit 1
	fi
	apt_pid=""
}

install_staticcheck() {
	if ! command -v staticcheck >/dev/null; then
		log "installing staticcheck"
		go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	fi
}

cleanup() {
	set +e
	[ -f "$work/redis.pid" ] && kill "$(cat "$work/redis.pid")" 2>/dev/null
	[ -f "$work/mysql.pid" ] && kill "$(cat "$work/mysql.pid")" 2>/dev/null
	sleep 0.5
	rm -rf "$work"
}
trap cleanup EXIT

start_redis() {
	redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize yes --pidfile "$work/redis.pid" --logfile "$work/redis.log" --dir "$work"
	for _ in $(seq 50); do
		redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	redis-cli -p "$REDIS_PORT" ping >/dev/null
	export RETRACE_TEST_REDIS="127.0.0.1:$REDIS_PORT"
}

start_mysql() {
	local user=()
	[ "$(id -u)" = 0 ] && user=(--user=root)
	mariadb-install-db "${user[@]}" --datadir="$work/mysql" --auth-root-authentication-method=normal \
		--skip-test-db >"$work/mysql-install.log" 2>&1
	# A scratch database: no fsync per commit (the log is flushed once a
	# second) and no doublewrite buffer, so a slow disk cannot stall the
	# tests' transactions for seconds.
	mariadbd "${user[@]}" --datadir="$work/mysql" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
		--socket="$work/mysql.sock" --pid-file="$work/mysql.pid" --skip-log-bin \
		--innodb-buffer-pool-size=64M --max-connections=500 \
		--innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 >"$work/mysql.log" 2>&1 &
	for _ in $(seq 100); do
		mariadb-admin --socket="$work/mysql.sock" -uroot ping >/dev/null 2>&1 && break
		sleep 0.2
	done
	mariadb --socket="$work/mysql.sock" -uroot <<-SQL
		CREATE DATABASE IF NOT EXISTS retrace_test;
		CREATE USER IF NOT EXISTS 'retrace'@'%' IDENTIFIED BY 'retrace';
		GRANT ALL ON *.* TO 'retrace'@'%';
	SQL
	export RETRACE_TEST_MYSQL="retrace:retrace@tcp(127.0.0.1:$MYSQL_PORT)/retrace_test?parseTime=true"
}

install_packages
install_staticcheck
log "gofmt"
bad=$(gofmt -l $(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go'))
[ -z "$bad" ] || { echo "gofmt would change: $bad"; exit 1; }
log "go vet"
go vet ./...
log "staticcheck"
staticcheck ./...
# The agent and what a service links with it must build for arm64 (DESIGN.md
# section 4: the patch-size guard differs there). The CLI is left out: it
# links the demo's embedded MySQL server, minutes of compiling for nothing
# the agent needs.
log "cross-build linux/arm64 (the agent and a service using it)"
GOOS=linux GOARCH=arm64 go build ./goid/... ./trace/... ./hook/... ./patches/... ./recording/... \
	./examples/orders/... ./examples/pricing/...

wait_packages
start_redis
start_mysql
export RETRACE_TEST_CHROMIUM=$(command -v chromium)
export RETRACE_TEST_ARTIFACTS=${RETRACE_TEST_ARTIFACTS:-$root/test-artifacts}
mkdir -p "$RETRACE_TEST_ARTIFACTS"

pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
log "go test -race ${pkgs[*]}"
go test -race -count=1 -timeout 10m "${pkgs[@]}"

# The agent's micro-benchmarks run once each, so that one that breaks (or
# hangs: they stand in for the netFD) fails here, not in a later session.
if [ $# -eq 0 ]; then
	log "agent benchmarks, one iteration each"
	# (timeout(1) as well: a benchmark stuck in a patched read was seen to
	# outlive go test's own -timeout)
	timeout -k 10 180 go test -run '^$' -bench . -benchtime 1x -timeout 2m ./goid/ ./trace/ ./hook/ >/dev/null
fi

# The agent patches machine code, and arm64 has its own jump encoding and
# size guard: its tests also run built for arm64, under qemu's user-mode
# emulation (which handles code that rewrites itself), against the same
# redis-server and mariadb.
if [ $# -eq 0 ] && [ "$(uname -m)" = x86_64 ]; then
	log "agent tests for linux/arm64 under qemu-aarch64-static"
	mkdir -p "$work/arm64"
	for p in goid trace hook patches recording/capture; do
		bin="$work/arm64/${p//\//_}.test"
		GOOS=linux GOARCH=arm64 go test -c -o "$bin" "./$p/"
		(cd "$p" && RETRACE_TEST_EXEC=qemu-aarch64-static qemu-aarch64-static "$bin" -test.count=1 -test.timeout=5m) |
			sed "s|^|$p (arm64): |"
	done
fi
log "all tests passed"
