#!/usr/bin/env bash
# The one test command (README): installs what the tests need when it is
# missing, starts redis-server and mariadb on loopback ports, runs the
# linters and every test, and stops what it started.
#
#   scripts/test.sh            everything
#   scripts/test.sh ./trace/   only these packages (linters still run)
#   scripts/test.sh --serve F  only start the servers, write their
#                              RETRACE_TEST_* exports to file F and stay up
#                              until killed (ports: the *_PORT variables below)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

REDIS_PORT=${REDIS_PORT:-16379}
REDIS_TLS_PORT=${REDIS_TLS_PORT:-16380}
REDIS_SHADOW_PORT=${REDIS_SHADOW_PORT:-16381}
MYSQL_PORT=${MYSQL_PORT:-13306}
MYSQL_TLS_PORT=${MYSQL_TLS_PORT:-13307}
MYSQL_SHADOW_PORT=${MYSQL_SHADOW_PORT:-13308}
POSTGRES_PORT=${POSTGRES_PORT:-15432}
work=$(mktemp -d /tmp/retrace-test.XXXXXX)
export PATH="$(go env GOPATH)/bin:$PATH"

log() { printf '==> %s (at %ds)\n' "$*" "$SECONDS"; }

# Debian packages install in the background while the linters compile: on
# a fresh machine the download and the compiler then overlap.
install_packages() {
	local need=()
	command -v redis-server >/dev/null || need+=(redis-server)
	command -v mariadbd >/dev/null || need+=(mariadb-server)
	# the server programs, and the postgres user they run as (initdb refuses root)
	{ pg_bin >/dev/null && id postgres >/dev/null 2>&1; } || need+=(postgresql)
	command -v openssl >/dev/null || need+=(openssl)
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

# pg_bin prints the directory of PostgreSQL's server programs (Debian keeps
# them out of PATH, under /usr/lib/postgresql/N/bin).
pg_bin() {
	local d
	for d in /usr/lib/postgresql/*/bin; do
		[ -x "$d/initdb" ] && { echo "$d"; return 0; }
	done
	command -v initdb >/dev/null && { dirname "$(command -v initdb)"; return 0; }
	return 1
}

install_staticcheck() {
	if ! command -v staticcheck >/dev/null; then
		log "installing staticcheck"
		go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	fi
}

cleanup() {
	set +e
	for f in "$work"/*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
	done
	[ -d "$work/pg" ] && runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1
	sleep 0.5
	rm -rf "$work"
}
trap cleanup EXIT

# certs makes a private CA and a server certificate for 127.0.0.1 and
# localhost, for the servers that speak TLS (the tests make their own too).
certs() {
	local d="$work/tls"
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=retrace-test-ca \
		-keyout "$d/ca.key" -out "$d/ca.pem" >/dev/null 2>&1
	openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$d/server.key" \
		-out "$d/server.csr" >/dev/null 2>&1
	printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$d/ext.cnf"
	openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 2 -extfile "$d/ext.cnf" -out "$d/server.pem" >/dev/null 2>&1
	chmod 0644 "$d"/*
	export RETRACE_TEST_CA="$d/ca.pem"
}

# redis NAME PORT [ARGS…] starts a scratch redis-server.
redis() {
	local name=$1 port=$2
	shift 2
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--daemonize yes --pidfile "$work/$name.pid" --logfile "$work/$name.log" --dir "$work" "$@"
	for _ in $(seq 50); do
		redis-cli -p "$port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
	redis-cli -p "$port" ping >/dev/null
}

start_redis() {
	redis redis "$REDIS_PORT"
	export RETRACE_TEST_REDIS="127.0.0.1:$REDIS_PORT"
	redis redis-shadow "$REDIS_SHADOW_PORT"
	export RETRACE_TEST_REDIS_SHADOW="127.0.0.1:$REDIS_SHADOW_PORT"
	# TLS only: the plaintext port is one nobody uses.
	redis redis-tls "$((REDIS_TLS_PORT + 1000))" --tls-port "$REDIS_TLS_PORT" \
		--tls-cert-file "$work/tls/server.pem" --tls-key-file "$work/tls/server.key" \
		--tls-ca-cert-file "$work/tls/ca.pem" --tls-auth-clients no
	export RETRACE_TEST_REDIS_TLS="127.0.0.1:$REDIS_TLS_PORT"
}

# mariadb NAME PORT [ARGS…] starts a scratch MariaDB with a database
# retrace_test and a user retrace/retrace.
mariadb_server() {
	local name=$1 port=$2
	shift 2
	local user=()
	[ "$(id -u)" = 0 ] && user=(--user=root)
	mariadb-install-db "${user[@]}" --datadir="$work/$name" --auth-root-authentication-method=normal \
		--skip-test-db >"$work/$name-install.log" 2>&1
	# A scratch database: no fsync per commit (the log is flushed once a
	# second) and no doublewrite buffer, so a slow disk cannot stall the
	# tests' transactions for seconds.
	mariadbd "${user[@]}" --datadir="$work/$name" --port="$port" --bind-address=127.0.0.1 \
		--socket="$work/$name.sock" --pid-file="$work/$name.pid" --skip-log-bin \
		--innodb-buffer-pool-size=64M --max-connections=500 \
		--innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 "$@" >"$work/$name.log" 2>&1 &
	for _ in $(seq 100); do
		mariadb-admin --socket="$work/$name.sock" -uroot ping >/dev/null 2>&1 && break
		sleep 0.2
	done
	mariadb --socket="$work/$name.sock" -uroot <<-SQL
		CREATE DATABASE IF NOT EXISTS retrace_test;
		CREATE USER IF NOT EXISTS 'retrace'@'%' IDENTIFIED BY 'retrace';
		GRANT ALL ON *.* TO 'retrace'@'%';
	SQL
}

start_mysql() {
	mariadb_server mysql "$MYSQL_PORT"
	export RETRACE_TEST_MYSQL="retrace:retrace@tcp(127.0.0.1:$MYSQL_PORT)/retrace_test?parseTime=true"
	mariadb_server mysql-shadow "$MYSQL_SHADOW_PORT"
	export RETRACE_TEST_MYSQL_SHADOW="retrace:retrace@tcp(127.0.0.1:$MYSQL_SHADOW_PORT)/retrace_test?parseTime=true"
	# Every account of this one must connect over TLS.
	mariadb_server mysql-tls "$MYSQL_TLS_PORT" --require-secure-transport=ON \
		--ssl-cert="$work/tls/server.pem" --ssl-key="$work/tls/server.key" --ssl-ca="$work/tls/ca.pem"
	export RETRACE_TEST_MYSQL_TLS="retrace:retrace@tcp(127.0.0.1:$MYSQL_TLS_PORT)/retrace_test?parseTime=true"
}

# start_postgres runs a scratch PostgreSQL with SCRAM-SHA-256 password
# authentication on loopback: user retrace, password retrace, database
# retrace_test. initdb refuses root, so the server runs as postgres. The
# server has TLS on (the certificate of certs): user retrace may use it,
# user retrace_tls (password retrace) must (hostssl only).
start_postgres() {
	local bin
	bin=$(pg_bin)
	mkdir -p "$work/pg" "$work/pgsock"
	printf 'retrace\n' >"$work/pgpass"
	chown postgres "$work/pg" "$work/pgsock" "$work/pgpass" 2>/dev/null || true
	chmod 0755 "$work"
	runuser -u postgres -- "$bin/initdb" -D "$work/pg" -U retrace --pwfile="$work/pgpass" \
		--auth=scram-sha-256 -E UTF8 >"$work/pg-install.log" 2>&1
	# the key must be the server user's and private to it
	cp "$work/tls/server.pem" "$work/pg/server.crt"
	cp "$work/tls/server.key" "$work/pg/server.key"
	chown postgres "$work/pg/server.crt" "$work/pg/server.key" 2>/dev/null || true
	chmod 0600 "$work/pg/server.key"
	# pg_hba.conf: the first line that fits decides
	{
		printf 'hostnossl all retrace_tls 0.0.0.0/0 reject\n'
		printf 'hostssl all retrace_tls 127.0.0.1/32 scram-sha-256\n'
		cat "$work/pg/pg_hba.conf"
	} >"$work/pg/pg_hba.new"
	mv "$work/pg/pg_hba.new" "$work/pg/pg_hba.conf"
	chown postgres "$work/pg/pg_hba.conf" 2>/dev/null || true
	runuser -u postgres -- "$bin/pg_ctl" -D "$work/pg" -l "$work/pgsock/pg.log" -w -o \
		"-p $POSTGRES_PORT -k $work/pgsock -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300 -c synchronous_commit=off -c ssl=on" \
		start >/dev/null
	PGPASSWORD=retrace psql -h 127.0.0.1 -p "$POSTGRES_PORT" -U retrace -d postgres -qc 'CREATE DATABASE retrace_test' >/dev/null
	PGPASSWORD=retrace psql -h 127.0.0.1 -p "$POSTGRES_PORT" -U retrace -d retrace_test -qc \
		"CREATE USER retrace_tls PASSWORD 'retrace'; GRANT ALL ON SCHEMA public TO retrace_tls" >/dev/null
	export RETRACE_TEST_POSTGRES="postgres://retrace:retrace@127.0.0.1:$POSTGRES_PORT/retrace_test?sslmode=disable"
	export RETRACE_TEST_POSTGRES_TLS="postgres://retrace_tls:retrace@127.0.0.1:$POSTGRES_PORT/retrace_test"
}

if [ "${1:-}" = --serve ]; then
	[ -n "${2:-}" ] || { echo "usage: scripts/test.sh --serve ENVFILE"; exit 2; }
	install_packages
	wait_packages
	certs
	start_redis
	start_mysql
	start_postgres
	env | grep '^RETRACE_TEST_' | sed 's/^/export /; s/=\(.*\)$/="\1"/' >"$2"
	log "servers up; their addresses are in $2"
	trap 'exit 0' TERM INT
	while :; do sleep 3600 & wait $!; done
fi

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
certs
start_redis
start_mysql
start_postgres
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
