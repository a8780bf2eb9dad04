package writepath

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
}

// binaries builds retrace and the orders example (with the agent's blank
// import) and returns their paths.
func binaries(t testing.TB) (retrace, orders string) {
	t.Helper()
	bins.once.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			bins.err = err
			return
		}
		if bins.dir, bins.err = os.MkdirTemp("", "retrace-writepath-bin-"); bins.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", bins.dir+string(filepath.Separator), "./cmd/retrace", "./examples/orders/cmd/orders")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		bins.retrace = filepath.Join(bins.dir, "retrace")
		bins.orders = filepath.Join(bins.dir, "orders")
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.retrace, bins.orders
}
