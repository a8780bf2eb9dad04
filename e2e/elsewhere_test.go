package e2e

import (
	"context"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/internal/demo"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// elsewhere returns the orders service's environment with every downstream
// moved to an address nothing listens on (a staging configuration), and the
// mapping from each new address to the recorded one.
func (s *stage) elsewhere(t *testing.T) (env []string, moved map[string]string) {
	t.Helper()
	mc, err := mysql.ParseDSN(envValue(s.env, orders.EnvMySQLDSN))
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(envValue(s.env, orders.EnvPricingURL))
	if err != nil {
		t.Fatal(err)
	}
	moved = map[string]string{}
	newMySQL, newRedis, newPricing, newFraud := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	moved[newMySQL], mc.Addr = mc.Addr, newMySQL
	moved[newRedis] = envValue(s.env, orders.EnvRedisAddr)
	moved[newPricing] = pu.Host
	moved[newFraud] = envValue(s.env, orders.EnvFraudAddr)
	env = []string{
		orders.EnvMySQLDSN + "=" + mc.FormatDSN(),
		orders.EnvRedisAddr + "=" + newRedis,
		orders.EnvPricingURL + "=http://" + newPricing,
		orders.EnvFraudAddr + "=" + newFraud,
	}
	return env, moved
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := cutEnv(env[i]); ok && k == key {
			return v
		}
	}
	return ""
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}

// TestReplayInAnotherEnvironment records the orders service with its
// downstreams at one set of addresses and replays it configured with
// another (issue 22), every downstream stopped: with no mapping the mock
// server finds each recorded destination by itself, with --map it is
// told; either way every session passes and each decision is listed.
func TestReplayInAnotherEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds binaries and sends hundreds of requests")
	}
	s := newStage(t)
	recDir := filepath.Join(s.dir, "recordings")
	rec := s.service("record", "RETRACE_MODE=record", "RETRACE_RECORD="+recDir, "RETRACE_APP=orders")
	const requests = 200
	st, err := demo.Traffic{BaseURL: rec.URL(), Requests: requests, Clients: 16, Seed: 22}.Run(context.Background())
	if err != nil || st.Errors != 0 {
		t.Fatalf("recording traffic: %+v, %v", st, err)
	}
	all := waitSessions(t, recDir, requests, 10*time.Second)
	if err := rec.Stop(); err != nil {
		t.Fatal(err)
	}
	s.stopDownstreams()
	env, moved := s.elsewhere(t)
	s.replayEnv = env
	for _, tc := range []struct {
		name string
		cfg  mockserver.Config
		how  string
	}{
		{name: "automatic", how: mockserver.HowAuto},
		{name: "mapped", cfg: mockserver.Config{Map: moved}, how: mockserver.HowMap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.t = t
			mock := startMockWith(t, tc.cfg, all)
			s.replayClean(mock, all, "report-"+tc.name, nil)
			got := map[string]mockserver.DestDecision{}
			for _, d := range mock.Destinations() {
				got[d.Live] = d
			}
			for live, recorded := range moved {
				d := got[live]
				if d.Recorded != recorded || d.How != tc.how {
					t.Errorf("destination %s: answered by %q (%s: %s), want %s (%s)", live, d.Recorded, d.How, d.Reason, recorded, tc.how)
				}
			}
		})
	}
}

// startMockWith is startMock with a configuration.
func startMockWith(t *testing.T, cfg mockserver.Config, sessions []*recording.Session) *mockserver.Server {
	t.Helper()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	mock, err := mockserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mock.Close() })
	if n, err := mock.Load(context.Background(), mockserver.SessionsSource(sessions...)); err != nil || n != len(sessions) {
		t.Fatalf("mock loaded %d of %d sessions: %v", n, len(sessions), err)
	}
	if err := mock.Start(); err != nil {
		t.Fatal(err)
	}
	return mock
}
