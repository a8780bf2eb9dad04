package trace

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"golang.org/x/sync/errgroup"
)

// inGoroutine runs f on a new goroutine started by the caller and waits.
func inGoroutine(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

func TestBindCurrentRelease(t *testing.T) {
	if Current() != nil || CurrentID() != "" {
		t.Fatalf("Current() = %v before any Bind", Current())
	}
	tr := &Trace{ID: "t-1"}
	release := Bind(tr)
	if Current() != tr || CurrentID() != "t-1" || Bound() != 1 {
		t.Fatalf("after Bind: Current()=%v CurrentID()=%q Bound()=%d", Current(), CurrentID(), Bound())
	}
	release()
	release() // safe twice
	if Current() != nil || Bound() != 0 || bindings.len() != 0 {
		t.Fatalf("after release: Current()=%v Bound()=%d table=%d", Current(), Bound(), bindings.len())
	}
	if runtime_getProfLabel() != nil {
		t.Fatalf("labels left on the goroutine after release")
	}
	Bind(nil)() // binds nothing
	if Bound() != 0 {
		t.Fatalf("Bind(nil) counted: Bound()=%d", Bound())
	}
}

// TestBindInheritedByEveryGoroutine: 64 concurrent "requests" each bind
// their own trace and fan out with plain go statements, errgroup and
// grandchildren; every goroutine must see exactly its request's trace.
func TestBindInheritedByEveryGoroutine(t *testing.T) {
	const requests, rounds = 64, 5
	for round := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, requests*8)
		for r := range requests {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("req-%d-%d", round, r)
				release := Bind(&Trace{ID: id})
				defer release()
				check := func(where string) {
					if got := CurrentID(); got != id {
						errs <- fmt.Errorf("%s of %s sees %q", where, id, got)
					}
				}
				check("handler")
				var inner sync.WaitGroup
				inner.Add(2)
				go func() {
					defer inner.Done()
					check("child")
					inGoroutine(func() {
						check("grandchild")
						inGoroutine(func() { check("great-grandchild") })
					})
				}()
				go func() {
					defer inner.Done()
					var g errgroup.Group
					for range 3 {
						g.Go(func() error {
							check("errgroup worker")
							inGoroutine(func() { check("errgroup grandchild") })
							return nil
						})
					}
					_ = g.Wait()
				}()
				inner.Wait()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if Bound() != 0 || bindings.len() != 0 {
			t.Fatalf("round %d: Bound()=%d table=%d after every release", round, Bound(), bindings.len())
		}
	}
}

// goroutineLabels returns the labels the goroutine profile shows for the
// goroutine blocked in a function whose name contains marker, as printed
// by runtime/pprof ({"k":"v", ...}). It proves our label set has the
// layout runtime/pprof expects.
func goroutineLabels(t *testing.T, marker string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	for block := range strings.SplitSeq(buf.String(), "\n\n") {
		if !strings.Contains(block, marker) {
			continue
		}
		for line := range strings.SplitSeq(block, "\n") {
			if l, ok := strings.CutPrefix(line, "# labels: "); ok {
				return l
			}
		}
		return ""
	}
	t.Fatalf("no goroutine in %s in the profile:\n%s", marker, buf.String())
	return ""
}

func goroutineStacks() string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	return buf.String()
}

// parkLabelProbe blocks until stop is closed; tests find it in profiles.
func parkLabelProbe(started chan<- struct{}, stop <-chan struct{}) {
	close(started)
	<-stop
}

// labelsOfChild starts a goroutine, reads its labels from a goroutine
// profile and returns them with what Current() says in it.
func labelsOfChild(t *testing.T) (labels, id string) {
	t.Helper()
	started, stop := make(chan struct{}), make(chan struct{})
	ids := make(chan string, 1)
	go func() {
		ids <- CurrentID()
		parkLabelProbe(started, stop)
	}()
	<-started
	labels = goroutineLabels(t, "parkLabelProbe")
	close(stop)
	id = <-ids
	// Wait until the probe has left parkLabelProbe, so that the next
	// profile cannot show it.
	for strings.Contains(goroutineStacks(), "parkLabelProbe") {
		runtime.Gosched()
	}
	return labels, id
}

func TestBindKeepsApplicationLabels(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		run        func(t *testing.T, check func(wantLabels, wantID string))
		afterLabel string
	}{
		{
			name: "pprof.Do then Bind",
			run: func(t *testing.T, check func(string, string)) {
				pprof.Do(ctx, pprof.Labels("app", "orders", "zone", "z1"), func(context.Context) {
					check(`{"app":"orders", "zone":"z1"}`, "")
					release := Bind(&Trace{ID: "t-do-bind"})
					check(`{"app":"orders", "retrace.trace":"t-do-bind", "zone":"z1"}`, "t-do-bind")
					release()
					check(`{"app":"orders", "zone":"z1"}`, "")
				})
			},
		},
		{
			name: "Bind then pprof.Do",
			run: func(t *testing.T, check func(string, string)) {
				release := Bind(&Trace{ID: "t-bind-do"})
				check(`{"retrace.trace":"t-bind-do"}`, "t-bind-do")
				pprof.Do(ctx, pprof.Labels("app", "orders"), func(context.Context) {
					// pprof.Do set the labels of its context, which
					// cannot hold ours: a child started right away does
					// not see the trace (documented limit) ...
					check(`{"app":"orders"}`, "")
					// ... but the bound goroutine does, and from its
					// first Current on, children do too.
					if got := CurrentID(); got != "t-bind-do" {
						t.Errorf("inside pprof.Do the bound goroutine sees %q", got)
					}
					check(`{"app":"orders", "retrace.trace":"t-bind-do"}`, "t-bind-do")
				})
				// pprof.Do restored the labels of ctx: none.
				check(``, "")
				if got := CurrentID(); got != "t-bind-do" {
					t.Errorf("after pprof.Do the bound goroutine sees %q", got)
				}
				check(`{"retrace.trace":"t-bind-do"}`, "t-bind-do")
				release()
				check(``, "")
			},
		},
		{
			name: "nested binds restore in order",
			run: func(t *testing.T, check func(string, string)) {
				pprof.Do(ctx, pprof.Labels("z", "1"), func(context.Context) {
					outer := Bind(&Trace{ID: "outer"})
					inner := Bind(&Trace{ID: "inner"})
					check(`{"retrace.trace":"inner", "z":"1"}`, "inner")
					inner()
					check(`{"retrace.trace":"outer", "z":"1"}`, "outer")
					outer()
					check(`{"z":"1"}`, "")
				})
			},
		},
		{
			name: "application key with our name is replaced, not duplicated",
			run: func(t *testing.T, check func(string, string)) {
				pprof.Do(ctx, pprof.Labels(LabelKey, "app-value"), func(context.Context) {
					release := Bind(&Trace{ID: "ours"})
					check(`{"retrace.trace":"ours"}`, "ours")
					release()
					check(`{"retrace.trace":"app-value"}`, "")
				})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.run(t, func(wantLabels, wantID string) {
				t.Helper()
				labels, id := labelsOfChild(t)
				if labels != wantLabels || id != wantID {
					t.Errorf("child has labels %s and trace %q, want %s and %q", labels, id, wantLabels, wantID)
				}
			})
			if Bound() != 0 || bindings.len() != 0 {
				t.Errorf("Bound()=%d table=%d at the end", Bound(), bindings.len())
			}
		})
	}
}

func TestOutlivingChildSeesNoTrace(t *testing.T) {
	release := Bind(&Trace{ID: "ended"})
	proceed, result := make(chan struct{}), make(chan string)
	go func() {
		<-proceed
		result <- CurrentID()
		// Its own Bind shadows the stale label, and its release leaves
		// no stale label behind.
		r := Bind(&Trace{ID: "own"})
		inGoroutine(func() {
			result <- CurrentID()
		})
		r()
		if runtime_getProfLabel() != nil {
			result <- "labels left"
			return
		}
		result <- CurrentID()
	}()
	release()
	// The next request bound on the same goroutine must not leak into the
	// outliving child either.
	next := Bind(&Trace{ID: "next"})
	defer next()
	close(proceed)
	for _, want := range []string{"", "own", ""} {
		if got := <-result; got != want {
			t.Errorf("outliving child: got %q, want %q", got, want)
		}
	}
}

func TestReleaseOnAnotherGoroutine(t *testing.T) {
	release := Bind(&Trace{ID: "x"})
	inGoroutine(release)
	if Current() != nil || Bound() != 0 || bindings.len() != 0 {
		t.Fatalf("Current()=%v Bound()=%d table=%d", Current(), Bound(), bindings.len())
	}
	// The stale label stays on this goroutine until it binds again.
	Bind(&Trace{ID: "y"})()
	if runtime_getProfLabel() != nil {
		t.Fatalf("stale label survived a later Bind and release")
	}
}

func TestReleaseOutOfOrder(t *testing.T) {
	a := Bind(&Trace{ID: "a"})
	b := Bind(&Trace{ID: "b"})
	a()
	if got := CurrentID(); got != "b" {
		t.Fatalf("after releasing the outer binding: %q", got)
	}
	b()
	if Current() != nil || bindings.len() != 0 || runtime_getProfLabel() != nil {
		t.Fatalf("after both: Current()=%v table=%d labels=%v", Current(), bindings.len(), runtime_getProfLabel())
	}
}

// TestReleasedTraceIsCollected: after release nothing of the trace stays
// reachable from any table, so memory does not grow with requests.
func TestReleasedTraceIsCollected(t *testing.T) {
	const n = 2000
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	ptrs := make([]weak.Pointer[Trace], 0, n)
	for i := range n {
		tr := &Trace{ID: fmt.Sprint("m-", i)}
		ptrs = append(ptrs, weak.Make(tr))
		release := Bind(tr)
		inGoroutine(func() { _ = Current() })
		release()
	}
	runtime.GC()
	runtime.GC()
	for i, p := range ptrs {
		if p.Value() != nil {
			t.Fatalf("trace %d still reachable after release", i)
		}
	}
	runtime.ReadMemStats(&ms)
	if grew := int64(ms.HeapInuse) - int64(before); grew > 1<<20 {
		t.Errorf("heap in use grew by %d bytes over %d bind/release cycles", grew, n)
	}
	if Bound() != 0 || bindings.len() != 0 {
		t.Fatalf("Bound()=%d table=%d", Bound(), bindings.len())
	}
}

// TestTimerCallbacksInheritNothing: time.AfterFunc callbacks run on
// goroutines the runtime starts from its timer code, not from whichever
// goroutine happened to be running: they must not see a bound trace.
func TestTimerCallbacksInheritNothing(t *testing.T) {
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range 4 {
		busy.Go(func() {
			release := Bind(&Trace{ID: "busy"})
			defer release()
			for {
				select {
				case <-stop:
					return
				default:
					time.Sleep(time.Microsecond)
				}
			}
		})
	}
	const timers = 500
	var fired sync.WaitGroup
	var leaked atomic.Int64
	for i := range timers {
		fired.Add(1)
		time.AfterFunc(time.Duration(i%20)*time.Microsecond, func() {
			defer fired.Done()
			if CurrentID() != "" {
				leaked.Add(1)
			}
		})
	}
	fired.Wait()
	close(stop)
	busy.Wait()
	if n := leaked.Load(); n > 0 {
		t.Fatalf("%d of %d timer callbacks saw a trace", n, timers)
	}
}

// TestCurrentDoesNotAllocate: lookups sit on every hooked Read and Write.
func TestCurrentDoesNotAllocate(t *testing.T) {
	check := func(name string) {
		t.Helper()
		if n := testing.AllocsPerRun(1000, func() { _ = Current() }); n != 0 {
			t.Errorf("%s: Current() allocates %v times per call", name, n)
		}
	}
	check("unbound")
	release := Bind(&Trace{ID: "a"})
	check("bound")
	inGoroutine(func() { check("inherited") })
	pprof.Do(context.Background(), pprof.Labels("app", "x"), func(context.Context) {
		_ = Current() // puts the label back once (allocates)
		check("bound, after the application replaced the labels")
	})
	release()
	inGoroutine(func() { check("unbound child") })
}

// TestDetach: goroutines started between Detach and Restore inherit no
// trace but keep the application's labels; the goroutine itself keeps its
// trace; after Restore new goroutines inherit the trace again.
func TestDetach(t *testing.T) {
	tr := &Trace{ID: "t-detach"}
	pprof.Do(context.Background(), pprof.Labels("app", "x"), func(ctx context.Context) {
		release := Bind(tr)
		defer release()
		var child *Trace
		var childApp string
		inGoroutine(func() { // an inheriting child, for the inherited case
			d := Detach()
			inGoroutine(func() {
				child = Current()
				childApp, _ = pprof.Label(labelsOfGoroutine(), "app")
			})
			d.Restore()
			if Current() != tr {
				t.Errorf("after Restore the child's trace is %v", Current())
			}
		})
		if child != nil || childApp != "x" {
			t.Errorf("started while detached: trace %v, app label %q; want none and x", child, childApp)
		}
		d := Detach()
		if Current() != tr {
			t.Errorf("the bound goroutine lost its trace: %v", Current())
		}
		d.Restore()
		inGoroutine(func() { child = Current() })
		if child != tr {
			t.Errorf("started after Restore: trace %v", child)
		}
	})
	d := Detach() // no trace: nothing to do
	if d.prev != nil {
		t.Error("Detach changed the labels of a goroutine with no trace")
	}
	d.Restore()
}

// labelsOfGoroutine returns a context holding the calling goroutine's
// pprof labels.
func labelsOfGoroutine() context.Context {
	ctx := context.Background()
	if ls := runtime_getProfLabel(); ls != nil {
		var kv []string
		for _, l := range (*labelSet)(ls).list {
			kv = append(kv, l.key, l.value)
		}
		ctx = pprof.WithLabels(ctx, pprof.Labels(kv...))
	}
	return ctx
}
