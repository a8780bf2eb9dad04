// Package testenv gives tests the addresses of the real servers that
// scripts/test.sh starts (redis-server, mariadb) and the path of Chromium.
//
// Outside CI a test whose server is not configured is skipped with the
// command that would run it; under CI (CI=true) it fails instead, so a
// missing service can never turn a suite green by skipping.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Environment variables set by scripts/test.sh.
const (
	RedisEnv    = "RETRACE_TEST_REDIS"    // host:port of a scratch redis-server
	MySQLEnv    = "RETRACE_TEST_MYSQL"    // go-sql-driver DSN of a scratch MariaDB database
	ChromiumEnv = "RETRACE_TEST_CHROMIUM" // path of a headless-capable Chromium
	// PostgresEnv is the URL of a scratch PostgreSQL database whose user
	// authenticates with SCRAM-SHA-256 (postgres://user:pass@host:port/db).
	PostgresEnv = "RETRACE_TEST_POSTGRES"
	// PostgresTLSEnv is the URL (no query) of the same database for a
	// user that must connect over TLS (hostssl only): add sslmode=require
	// or verify-full with sslrootcert set to the CA file.
	PostgresTLSEnv = "RETRACE_TEST_POSTGRES_TLS"
	RedisTLSEnv    = "RETRACE_TEST_REDIS_TLS"    // host:port of a redis-server that speaks only TLS
	MySQLTLSEnv    = "RETRACE_TEST_MYSQL_TLS"    // DSN of a MariaDB that requires TLS (add the tls= parameter)
	CAEnv          = "RETRACE_TEST_CA"           // PEM file of the CA that signed the TLS servers' certificates
	RedisShadowEnv = "RETRACE_TEST_REDIS_SHADOW" // host:port of a second, separate redis-server
	MySQLShadowEnv = "RETRACE_TEST_MYSQL_SHADOW" // DSN of a second, separate MariaDB
	// ExecEnv names a program that runs the test binary when a test starts
	// it again as a child: an emulator such as qemu-aarch64-static when
	// the tests of another architecture run under it.
	ExecEnv = "RETRACE_TEST_EXEC"
)

func need(t testing.TB, env, what string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not set: %s is required under CI (scripts/test.sh starts it)", env, what)
	}
	t.Skipf("%s is not set; run scripts/test.sh to start %s", env, what)
	return ""
}

// RedisAddr returns the host:port of the test redis-server.
func RedisAddr(t testing.TB) string { return need(t, RedisEnv, "redis-server") }

// MySQLDSN returns the DSN of the test MariaDB database (go-sql-driver/mysql syntax).
func MySQLDSN(t testing.TB) string { return need(t, MySQLEnv, "mariadb") }

// PostgresURL returns the URL of the test PostgreSQL database (SCRAM
// authentication, sslmode=disable).
func PostgresURL(t testing.TB) string { return need(t, PostgresEnv, "postgresql") }

// PostgresTLSURL returns the URL (no query) of the test PostgreSQL database
// for a user that must connect over TLS, and the PEM file of the CA that
// signed the server's certificate.
func PostgresTLSURL(t testing.TB) (url, caFile string) {
	return need(t, PostgresTLSEnv, "postgresql with a TLS-only user"), need(t, CAEnv, "the test CA")
}

// RedisTLSAddr returns the host:port of the TLS-only test redis-server and
// the PEM file of the CA that signed its certificate.
func RedisTLSAddr(t testing.TB) (addr, caFile string) {
	return need(t, RedisTLSEnv, "redis-server with --tls-port"), need(t, CAEnv, "the test CA")
}

// MySQLTLSDSN returns the DSN of the MariaDB that requires TLS and the PEM
// file of the CA that signed its certificate.
func MySQLTLSDSN(t testing.TB) (dsn, caFile string) {
	return need(t, MySQLTLSEnv, "mariadb with TLS required"), need(t, CAEnv, "the test CA")
}

// RedisShadowAddr returns the host:port of the second ("shadow") redis-server.
func RedisShadowAddr(t testing.TB) string { return need(t, RedisShadowEnv, "a second redis-server") }

// MySQLShadowDSN returns the DSN of the second ("shadow") MariaDB.
func MySQLShadowDSN(t testing.TB) string { return need(t, MySQLShadowEnv, "a second mariadb") }

// Chromium returns the path of the Chromium binary for headless checks.
func Chromium(t testing.TB) string { return need(t, ChromiumEnv, "chromium") }

// SelfCommand returns the command that runs this test binary again with
// args (through the ExecEnv program when it is set).
func SelfCommand(args ...string) *exec.Cmd {
	if w := os.Getenv(ExecEnv); w != "" {
		return exec.Command(w, append([]string{os.Args[0]}, args...)...)
	}
	return exec.Command(os.Args[0], args...)
}

// Need64Bit skips a test of a struct layout measured on 64-bit platforms.
func Need64Bit(tb testing.TB) {
	tb.Helper()
	if ^uintptr(0)>>63 == 0 {
		tb.Skip("layout of 64-bit platforms")
	}
}
