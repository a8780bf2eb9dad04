# Checks shared by the measurement scripts (bench-record.sh, count-record.sh,
# perf-record.sh), sourced by them. SCRIPT names the caller in messages.

# need_tools "APT PACKAGES" TOOL...: every TOOL on the PATH, or a message
# naming the packages that bring them, and exit 2.
need_tools() {
	local pkgs=$1 tool
	shift
	for tool in "$@"; do
		command -v "$tool" >/dev/null || {
			echo "$SCRIPT: $tool not found (apt-get install -y $pkgs)" >&2
			exit 2
		}
	done
}

# need_test_dbs: the Redis and MariaDB of the tests, as for `go test`.
need_test_dbs() {
	if [ -z "${RETRACE_TEST_REDIS:-}" ] || [ -z "${RETRACE_TEST_MYSQL:-}" ]; then
		echo "$SCRIPT: set RETRACE_TEST_REDIS and RETRACE_TEST_MYSQL (see docs/recording.md)" >&2
		exit 2
	fi
}
