package schema_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/retrace-dev/retrace/replayer/schema"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func serve(t *testing.T, withReflection bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if withReflection {
		reflection.Register(srv)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return "http://" + l.Addr().String()
}

func TestReflect(t *testing.T) {
	s, err := schema.Reflect(context.Background(), serve(t, true), nil)
	if err != nil {
		t.Fatal(err)
	}
	in, out, err := s.Method("/grpc.health.v1.Health/Check")
	if err != nil || in.FullName() != "grpc.health.v1.HealthCheckRequest" || out.FullName() != "grpc.health.v1.HealthCheckResponse" {
		t.Fatalf("Health/Check: %v %v %v", in, out, err)
	}
}

func TestReflectErrors(t *testing.T) {
	_, err := schema.Reflect(context.Background(), serve(t, false), nil)
	if err == nil || !strings.Contains(err.Error(), "reflection service") {
		t.Errorf("server without reflection: %v", err)
	}
	for _, bad := range []string{"127.0.0.1:1", "ftp://h:1", "http://"} {
		if _, err := schema.Reflect(context.Background(), bad, nil); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := schema.File("/nonexistent.protoset"); err == nil {
		t.Error("missing descriptor set file: no error")
	}
}
