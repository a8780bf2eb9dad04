package grpctest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/retrace-dev/retrace/internal/grpctest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestExercise: the service answers every call Exercise makes as Exercise
// expects, and notes each call's metadata.
func TestExercise(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svc := grpctest.Serve(t, l)
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := grpctest.Exercise(ctx, cc, "smoke")
	if err != nil || n != 5 {
		t.Fatalf("%d calls: %v", n, err)
	}
	if len(svc.Seen) != 4 || svc.Seen[0].Get("x-trace")[0] != "smoke" {
		t.Fatalf("seen %v", svc.Seen)
	}
}
