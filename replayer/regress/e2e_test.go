package regress_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
	"github.com/retrace-dev/retrace/replayer/replaytest"
)

// TestEndToEndWithMockServer records the shop against its real price
// service, then replays it through the real mock server (downstream
// requests framed as the agent frames them) at concurrency 8, each session
// three times at once: the same build passes once noise is detected, the
// changed build fails exactly the changed sessions, naming the field path
// and the downstream request.
func TestEndToEndWithMockServer(t *testing.T) {
	sessions := record(t)
	dir := t.TempDir()
	replaytest.WriteStore(t, dir, sessions...)
	src, err := regress.OpenSource(context.Background(), dir, func(err error) { t.Error(err) })
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()

	mock := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	v1 := replaytest.NewShop(t, replaytest.ShopV1, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	v2 := replaytest.NewShop(t, replaytest.ShopV2, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	cfg := regress.Config{Source: src, Target: v1.URL, MockAdmin: mock.AdminURL(), Concurrency: 8, Repeat: 3}

	n, err := regress.DetectNoise(context.Background(), cfg, regress.NoiseConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Errors != 0 || len(n.Rules) != 3 {
		t.Fatalf("noise: %d errors, rules %+v", n.Errors, n.Rules)
	}
	cfg.Rules, err = diff.NewRules(n.Rules...)
	if err != nil {
		t.Fatal(err)
	}

	c := run(t, cfg)
	if got := c.byStatus(regress.Passed); len(got) != 3*len(sessions) {
		for _, r := range c.results {
			if r.Status != regress.Passed {
				t.Logf("%s: %s %s %v", r.Name(), r.Status, r.Error, r.Findings)
			}
		}
		t.Fatalf("same build: %d of %d replays passed", len(got), 3*len(sessions))
	}

	cfg.Target = v2.URL
	c = run(t, cfg)
	var want []string
	for _, id := range []string{"s02-b", "s03-b", "s04-c", "s05-c"} {
		want = append(want, id, id+"#1", id+"#2")
	}
	if got := c.byStatus(regress.Failed); fmt.Sprint(got) != fmt.Sprint(sorted(want)) {
		t.Fatalf("changed build failed %v, want %v (errors %v)", got, sorted(want), c.byStatus(regress.Errored))
	}
	for _, r := range c.results {
		var paths []string
		for _, f := range r.Findings {
			paths = append(paths, f.Where+" "+f.Path)
		}
		switch r.Session {
		case "s02-b", "s03-b":
			if fmt.Sprint(paths) != "[response body.order.total]" {
				t.Errorf("%s: %v", r.Name(), paths)
			}
		case "s04-c", "s05-c":
			if fmt.Sprint(paths) != "[downstream target]" || r.Findings[0].Got != "/price?sku=c&currency=EUR" {
				t.Errorf("%s: %v %+v", r.Name(), paths, r.Findings)
			}
		}
	}
}

// TestReplaysLeaveNoTraceState replays many sessions at once through the
// real mock server: once every replay is over, the mock server holds no
// state of any of their traces.
func TestReplaysLeaveNoTraceState(t *testing.T) {
	sessions := record(t)
	mock := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	shop := replaytest.NewShop(t, replaytest.ShopV1, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	cfg := regress.Config{Source: regress.Sessions(sessions), Target: shop.URL, MockAdmin: mock.AdminURL(), Concurrency: 16, Repeat: 60}
	c := run(t, cfg)
	if got := len(c.byStatus(regress.Errored)); got != 0 {
		t.Fatalf("%d replays errored", got)
	}
	if n := mock.Traces(); n != 0 {
		t.Fatalf("%d replays of %d left trace state behind", n, len(c.results))
	}
}

// A mock server with an admin token: the replayer sends it; without it
// every replay is an error naming the refusal.
func TestMockAdminToken(t *testing.T) {
	sessions := record(t)
	mock := mocktest.NewServer(t, mockserver.Config{AdminToken: "tok-123"}, sessions...)
	shop := replaytest.NewShop(t, replaytest.ShopV1, replaytest.Framed(mock.Addr(), replaytest.PricesDst))
	cfg := regress.Config{Source: regress.Sessions(sessions), Target: shop.URL, MockAdmin: mock.AdminURL(), MockAdminToken: "tok-123"}
	c := run(t, cfg)
	if n := len(c.byStatus(regress.Errored)); n != 0 || len(c.results) != len(sessions) {
		t.Fatalf("with the token: %d of %d replays errored", n, len(c.results))
	}
	cfg.MockAdminToken = ""
	err := regress.Run(context.Background(), cfg, func(*regress.Result) { t.Error("a session was replayed without the token") })
	if !errors.Is(err, regress.ErrUnreachable) || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "--mock-admin-token") {
		t.Fatalf("without the token: %v; want the run refused at once, naming 401 and the flag", err)
	}
}
