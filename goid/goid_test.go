package goid

import (
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// stackID parses the id the runtime prints in "goroutine N [running]:".
func stackID(t *testing.T) int64 {
	t.Helper()
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	if len(f) < 2 || f[0] != "goroutine" {
		t.Fatalf("unexpected stack header %q", buf)
	}
	id, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatalf("stack header %q: %v", buf, err)
	}
	return id
}

func TestGetMatchesRuntimeAndIsUnique(t *testing.T) {
	const n = 64
	ids := make([]int64, n)
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			id := Get()
			if want := stackID(t); id != want {
				errs <- "Get() = " + strconv.FormatInt(id, 10) + ", runtime says " + strconv.FormatInt(want, 10)
			}
			if again := Get(); again != id {
				errs <- "Get() changed within one goroutine"
			}
			ids[i] = id
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	seen := map[int64]bool{Get(): true}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("goroutine id %d seen twice", id)
		}
		seen[id] = true
	}
}

func BenchmarkGet(b *testing.B) {
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		s += Get()
	}
	_ = s
}

func TestParent(t *testing.T) {
	type result struct {
		parent, got int64
		ok          bool
	}
	res := make(chan result, 1)
	parent := Get()
	go func() {
		p, ok := Parent()
		res <- result{parent, p, ok}
	}()
	r := <-res
	if !r.ok {
		if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
			t.Fatalf("Parent() not available on %s/%s", runtime.GOARCH, runtime.Version())
		}
		t.Skipf("Parent() not supported on %s", runtime.GOARCH)
	}
	if r.got != r.parent {
		t.Fatalf("Parent() = %d in a goroutine started by %d", r.got, r.parent)
	}
	// Grandchildren report their own parent, not the grandparent.
	done := make(chan [2]int64)
	go func() {
		mid := Get()
		go func() {
			p, _ := Parent()
			done <- [2]int64{mid, p}
		}()
	}()
	if ids := <-done; ids[0] != ids[1] {
		t.Fatalf("grandchild: Parent() = %d, its parent is %d", ids[1], ids[0])
	}
}

func BenchmarkParent(b *testing.B) {
	b.ReportAllocs()
	var s int64
	for b.Loop() {
		p, _ := Parent()
		s += p
	}
	_ = s
}

// TestStack: the bounds hold a local variable of the caller, on the test's
// goroutine and on a fresh one, also after the stack grew.
func TestStack(t *testing.T) {
	check := func() {
		lo, hi, ok := Stack()
		var x int
		at := uintptr(unsafe.Pointer(&x))
		if !ok || at < lo || at >= hi || hi-lo < 2048 {
			t.Errorf("stack [%#x, %#x) ok=%v, a local at %#x", lo, hi, ok, at)
		}
	}
	check()
	done := make(chan struct{})
	go func() { defer close(done); check(); deep(200, check) }()
	<-done
}

func deep(n int, f func()) {
	var pad [64]byte
	if n == 0 {
		f()
		return
	}
	deep(n-1, f)
	_ = pad
}
