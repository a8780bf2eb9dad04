package regress_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestPreflightNamesWhatDoesNotAnswer(t *testing.T) {
	sessions := record(t)
	mock := replaytest.NewMock(t, sessions...)
	shop := replaytest.NewShop(t, replaytest.ShopV1, replaytest.InMock(mock, replaytest.PricesDst))
	down := "http://" + closedAddr(t)
	for _, tc := range []struct {
		name          string
		target, admin string
		want          string
	}{
		{name: "target", target: down, admin: mock.URL, want: "candidate target " + down},
		{name: "mock admin", target: shop.URL, admin: down, want: "candidate mock admin " + down},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := 0
			cfg := regress.Config{Source: regress.Sessions(sessions), Target: tc.target, MockAdmin: tc.admin}
			err := regress.Run(context.Background(), cfg, func(*regress.Result) { called++ })
			if !errors.Is(err, regress.ErrUnreachable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run: %v, want ErrUnreachable naming %q", err, tc.want)
			}
			if called != 0 {
				t.Errorf("%d sessions replayed before the check failed", called)
			}
			if _, err := regress.DetectNoise(context.Background(), cfg, regress.NoiseConfig{}); !errors.Is(err, regress.ErrUnreachable) {
				t.Errorf("DetectNoise: %v, want ErrUnreachable", err)
			}
		})
	}
}

// A target whose downstream calls bypass the mock server (started without
// RETRACE_MODE=replay) is stopped after its first sessions, with the
// reason, instead of failing every session on its downstream diff.
func TestTargetNotInReplayModeStopsEarly(t *testing.T) {
	sessions := record(t)
	var many = sessions
	for i := 0; i < 20; i++ {
		many = append(many, sessions...)
	}
	prices := replaytest.NewPrices(t)
	mock := replaytest.NewMock(t, sessions...)
	live := replaytest.NewShop(t, replaytest.ShopV1, replaytest.Direct(replaytest.Addr(prices.URL)))
	cfg := regress.Config{Source: regress.Sessions(many), Target: live.URL, MockAdmin: mock.URL, Concurrency: 2}
	var got int
	err := regress.Run(context.Background(), cfg, func(*regress.Result) { got++ })
	if !errors.Is(err, regress.ErrNotReplaying) {
		t.Fatalf("Run: %v, want ErrNotReplaying", err)
	}
	if got >= len(many)/2 {
		t.Errorf("%d of %d sessions replayed before the run stopped", got, len(many))
	}

	// The same target in replay mode runs to the end.
	replaying := replaytest.NewShop(t, replaytest.ShopV1, replaytest.InMock(mock, replaytest.PricesDst))
	cfg.Target = replaying.URL
	c := run(t, cfg)
	if len(c.results) != len(many) {
		t.Fatalf("%d results, want %d", len(c.results), len(many))
	}

	// --no-mode-check: every session is replayed, and fails its diff.
	cfg.Target, cfg.NoModeCheck = live.URL, true
	c = run(t, cfg)
	if len(c.results) != len(many) {
		t.Fatalf("with NoModeCheck: %d results, want %d", len(c.results), len(many))
	}
}
