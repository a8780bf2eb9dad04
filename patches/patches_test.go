package patches

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "serve" {
		serveChild() // a service with the agent started by init from the environment
		return
	}
	goleak.VerifyTestMain(m)
}

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestFromEnv(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		mode    hook.Mode
		mock    string
		pass    []string
		baffle  []string
		rewrite map[string]string
		wantErr string
	}{
		{name: "unset", env: nil, mode: hook.Off},
		{name: "off", env: map[string]string{EnvMode: "off"}, mode: hook.Off},
		{name: "replay", env: map[string]string{EnvMode: "Replay", EnvMockAddr: "127.0.0.1:4000", EnvPassthrough: " 127.0.0.1:5432 , [::1]:6379,"},
			mode: hook.Replay, mock: "127.0.0.1:4000", pass: []string{"127.0.0.1:5432", "[::1]:6379"}},
		{name: "record", env: map[string]string{EnvMode: "record", EnvLog: "debug"}, mode: hook.Record},
		{name: "bad mode", env: map[string]string{EnvMode: "replya"}, wantErr: `RETRACE_MODE: retrace: mode "replya"`},
		{name: "bad log", env: map[string]string{EnvMode: "replay", EnvLog: "loud"}, wantErr: `RETRACE_LOG: log level "loud"`},
		{name: "bad mock", env: map[string]string{EnvMode: "replay", EnvMockAddr: "localhost"}, wantErr: `RETRACE_MOCK_ADDR: "localhost" is not host:port`},
		{name: "passthrough names and ranges", env: map[string]string{EnvMode: "replay", EnvPassthrough: "db,10.0.0.0/8,shadow.test:3306,::1"},
			mode: hook.Replay, pass: []string{"db", "10.0.0.0/8", "shadow.test:3306", "::1"}},
		{name: "baffle and rewrite", env: map[string]string{EnvMode: "replay", EnvBaffle: "pricing.prod:8081, 10.1.0.0/16",
			EnvRewrite: "mysql.prod:3306=127.0.0.1:3307, 10.0.0.7:6379 = shadow-redis:6380"},
			mode: hook.Replay, baffle: []string{"pricing.prod:8081", "10.1.0.0/16"},
			rewrite: map[string]string{"mysql.prod:3306": "127.0.0.1:3307", "10.0.0.7:6379": "shadow-redis:6380"}},
		{name: "bad passthrough", env: map[string]string{EnvMode: "replay", EnvPassthrough: "127.0.0.1:1,db!"}, wantErr: `RETRACE_PASSTHROUGH: "db!" is neither host:port`},
		{name: "bad range", env: map[string]string{EnvMode: "replay", EnvBaffle: "10.0.0.0/33"}, wantErr: `RETRACE_BAFFLE: "10.0.0.0/33" is not a CIDR range`},
		{name: "bad rewrite", env: map[string]string{EnvMode: "replay", EnvRewrite: "mysql.prod:3306"}, wantErr: `RETRACE_REWRITE: "mysql.prod:3306" is not FROM=TO`},
		{name: "bad rewrite target", env: map[string]string{EnvMode: "replay", EnvRewrite: "a:1=10.0.0.0/8"}, wantErr: `RETRACE_REWRITE: "a:1=10.0.0.0/8": "10.0.0.0/8" is not host:port or a host`},
		{name: "bad port", env: map[string]string{EnvMode: "replay", EnvBaffle: "pricing:http2x"}, wantErr: `RETRACE_BAFFLE: "pricing:http2x": bad port`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := FromEnv(env(c.env))
			if c.wantErr != "" {
				require.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.mode, cfg.Mode)
			require.Equal(t, c.mock, cfg.MockAddr)
			require.Equal(t, c.pass, cfg.Passthrough)
			require.Equal(t, c.baffle, cfg.Baffle)
			require.Equal(t, c.rewrite, cfg.Rewrite)
			require.NotNil(t, cfg.Logger)
		})
	}
}

// TestStartFromEnv: a bad value leaves the agent off with nothing patched;
// replay mode patches and its stop unpatches; record mode without a
// registered recorder says so and stays off.
func TestStartFromEnv(t *testing.T) {
	stop, err := startFromEnv(env(map[string]string{EnvMode: "replay", EnvMockAddr: "nohost"}))
	require.Error(t, err)
	require.Nil(t, stop)
	require.Empty(t, hook.ReadStats().Patched)

	stop, err = startFromEnv(env(map[string]string{EnvMode: "replay", EnvMockAddr: "127.0.0.1:9"}))
	require.NoError(t, err)
	require.NotEmpty(t, hook.ReadStats().Patched)
	require.Equal(t, hook.Replay, hook.ReadStats().Mode)
	require.NoError(t, stop(context.Background()))
	require.NoError(t, stop(context.Background()))
	require.Empty(t, hook.ReadStats().Patched)

	if recorderFactory == nil {
		_, err = startFromEnv(env(map[string]string{EnvMode: "record"}))
		require.ErrorContains(t, err, "record mode is not available")
		require.Empty(t, hook.ReadStats().Patched)
	}

	stop, err = startFromEnv(env(nil))
	require.NoError(t, err)
	require.Nil(t, stop)
	require.Empty(t, hook.ReadStats().Patched)
}

// TestInitFromEnvironment runs this test binary again with the agent's
// environment set, so init itself is what is tested: a bad value is
// reported once on standard error and the agent stays off; replay mode is
// installed before main runs.
func TestInitFromEnvironment(t *testing.T) {
	if os.Getenv("RETRACE_PATCHES_CHILD") != "" {
		st := hook.ReadStats()
		os.Stdout.WriteString("mode=" + st.Mode.String() + " patched=" + strconv.Itoa(len(st.Patched)) + "\n")
		if err := Err(); err != nil {
			os.Stdout.WriteString("err=" + err.Error() + "\n")
		}
		if err := Stop(context.Background()); err != nil {
			os.Stdout.WriteString("stop=" + err.Error() + "\n")
		}
		return
	}
	run := func(kv ...string) (stdout, stderr string) {
		cmd := testenv.SelfCommand("-test.run=^TestInitFromEnvironment$", "-test.count=1")
		cmd.Env = append(os.Environ(), append([]string{"RETRACE_PATCHES_CHILD=1"}, kv...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		require.NoError(t, cmd.Run(), "child: %s %s", out.String(), errb.String())
		return out.String(), errb.String()
	}
	out, errOut := run("RETRACE_MODE=sometimes")
	require.Contains(t, out, "mode=off patched=0")
	require.Contains(t, out, `err=RETRACE_MODE: retrace: mode "sometimes" is not one of off, record, replay`)
	require.Equal(t, 1, strings.Count(errOut, "retrace: agent off"), errOut)

	out, errOut = run("RETRACE_MODE=replay", "RETRACE_MOCK_ADDR=127.0.0.1:9")
	require.Contains(t, out, "mode=replay patched=15") // with RETRACE_RANDOM=math, the default; TLS's 3; net/http's HTTP/2 server's serverConnBaseContext
	require.NotContains(t, errOut, "retrace:")

	out, _ = run("RETRACE_MODE=replay", "RETRACE_MOCK_ADDR=127.0.0.1:9", "RETRACE_RANDOM=off")
	require.Contains(t, out, "mode=replay patched=12")
	out, _ = run("RETRACE_MODE=replay", "RETRACE_MOCK_ADDR=127.0.0.1:9", "RETRACE_RANDOM=all")
	require.Contains(t, out, "mode=replay patched=17") // crypto/rand.Read and Reader's Read
	out, errOut = run("RETRACE_MODE=replay", "RETRACE_RANDOM=sometimes")
	require.Contains(t, out, "mode=off patched=0")
	require.Contains(t, out, `err=RETRACE_RANDOM: retrace: random "sometimes" is not one of off, math, all`)
	require.Equal(t, 1, strings.Count(errOut, "retrace: agent off"), errOut)

	out, _ = run("RETRACE_MODE=")
	require.Contains(t, out, "mode=off patched=0")

	if recorderFactory != nil {
		// Record mode: conn Read/Write/Close, the HTTP transport, the TLS
		// hooks and the math/rand sources; no connect redirection, no clock.
		out, errOut = run("RETRACE_MODE=record", "RETRACE_RECORD="+t.TempDir())
		require.Contains(t, out, "mode=record patched=12")
		require.NotContains(t, out, "err=")
		require.NotContains(t, out, "stop=")
		require.NotContains(t, errOut, "retrace: agent off")
	}
}
