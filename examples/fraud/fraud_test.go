package fraud_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/retrace-dev/retrace/examples/fraud"
	"github.com/retrace-dev/retrace/wire/protobuf"
	"github.com/retrace-dev/retrace/wire/protobuf/descriptors"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts the service on a loopback port and returns a connection to
// it; both end with the test.
func serve(t *testing.T) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := fraud.NewGRPCServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return cc
}

func order(user int64, country, tier string, lines ...fraud.Line) *fraud.Order {
	o := &fraud.Order{UserID: user, Country: country, Tier: tier, Currency: "EUR", Lines: lines}
	for _, l := range lines {
		o.TotalCents += int64(l.Qty) * l.UnitCents
	}
	return o
}

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		o       *fraud.Order
		risks   []int32
		score   int32
		allowed bool
	}{
		{"small EU order", order(1, "DE", "gold", fraud.Line{"CB-010", 2, 899}), []int32{0}, 0, true},
		{"two monitors", order(2, "FR", "silver", fraud.Line{"MN-270", 2, 27900}), []int32{20}, 10, true},
		{"abroad, big and new", order(3, "US", "standard", fraud.Line{"MN-270", 3, 27900}, fraud.Line{"DK-500", 3, 18900}, fraud.Line{"HD-330", 1, 14950}),
			[]int32{35, 35, 1}, 35 + 25 + 30 + 15, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigs, err := fraud.Screen(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range sigs {
				if s.Risk != tc.risks[i] || s.SKU != tc.o.Lines[i].SKU {
					t.Errorf("signal %d: %+v, want risk %d", i, s, tc.risks[i])
				}
				tc.o.ScreenedRisk += s.Risk
			}
			v, err := fraud.Check(tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if v.Score != tc.score || v.Allow != tc.allowed {
				t.Errorf("verdict %+v, want score %d allow %v", v, tc.score, tc.allowed)
			}
		})
	}
}

// TestOverGRPC calls the service from 32 goroutines over one ClientConn:
// every answer is the one the rules give for that caller's order.
func TestOverGRPC(t *testing.T) {
	cc := serve(t)
	ctx := context.Background()
	c := fraud.NewClient(cc)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			o := order(int64(i+1), []string{"DE", "US"}[i%2], "standard",
				fraud.Line{fmt.Sprintf("SKU-%02d", i), int32(1 + i%4), int64(1000 * i)}, fraud.Line{"CB-010", 1, 899})
			sigs, err := c.Screen(ctx, o)
			if err != nil {
				t.Error(err)
				return
			}
			want, _ := fraud.Screen(o)
			if fmt.Sprint(sigs) != fmt.Sprint(want) {
				t.Errorf("caller %d: signals %v, want %v", i, sigs, want)
			}
			for _, s := range sigs {
				o.ScreenedRisk += s.Risk
			}
			v, err := c.Check(ctx, o)
			if err != nil {
				t.Error(err)
				return
			}
			wantV, _ := fraud.Check(o)
			if fmt.Sprint(v) != fmt.Sprint(wantV) {
				t.Errorf("caller %d: verdict %+v, want %+v", i, v, wantV)
			}
		})
	}
	wg.Wait()
	if _, err := c.Check(ctx, &fraud.Order{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty order: %v, want InvalidArgument", err)
	}
	if _, err := c.Screen(ctx, &fraud.Order{UserID: 1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("order without lines: %v, want InvalidArgument", err)
	}
	for _, svc := range []string{"", fraud.ServiceName} {
		r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v %v", svc, r, err)
		}
	}
}

// TestSchema: the descriptor set decodes the messages by name, and without
// it they decode by field number.
func TestSchema(t *testing.T) {
	b, err := fraud.FileDescriptorSet()
	if err != nil {
		t.Fatal(err)
	}
	s, err := descriptors.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	in, out, err := s.Method(fraud.CheckMethod)
	if err != nil {
		t.Fatal(err)
	}
	if in.Name() != "Order" || out.Name() != "Verdict" {
		t.Fatalf("Check: %s → %s", in.Name(), out.Name())
	}
	wire, err := order(7, "NL", "gold", fraud.Line{"KB-101", 1, 8999}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	named, err := descriptors.Decode(in, wire)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := protobuf.DecodeRaw(wire)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(named["country"]) != "NL" || fmt.Sprint(raw["2"]) != "NL" {
		t.Errorf("by name %v, by number %v", named, raw)
	}
}
