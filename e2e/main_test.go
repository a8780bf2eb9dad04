package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// bins are the binaries under test, built once per test run.
var bins struct {
	once    sync.Once
	dir     string
	err     error
	retrace string
	orders  string
	front   string // the gRPC service of grpc_test.go
}

// moduleRoot is the repository root (the tests run in e2e/).
func moduleRoot(t testing.TB) string {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// binaries builds retrace, the orders example and grpcfront (both with the
// agent's blank import), all in one go build once per test binary run, and
// returns the paths of the first two.
func binaries(t testing.TB) (retrace, orders string) {
	t.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "retrace-e2e-bin-")
		if bins.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", bins.dir+string(filepath.Separator), "./cmd/retrace", "./examples/orders/cmd/orders", "./e2e/grpcfront")
		cmd.Dir = moduleRoot(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			bins.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		bins.retrace = filepath.Join(bins.dir, "retrace")
		bins.orders = filepath.Join(bins.dir, "orders")
		bins.front = filepath.Join(bins.dir, "grpcfront")
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.retrace, bins.orders
}

// frontBinary is the path of grpcfront, built by binaries.
func frontBinary(t testing.TB) string {
	t.Helper()
	binaries(t)
	return bins.front
}
