package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/capture"
)

// TestGRPCRecordedByTheAgent closes the loop with the agent on both
// ends: an HTTP service whose requests each call a gRPC downstream (every
// call kind, over one shared ClientConn) is recorded in record mode by
// the agent and capture, 32 requests at once, each gRPC stream one call
// of its request's session; then, the downstream stopped, a running mock
// server loaded with those sessions answers the same requests replayed
// in replay mode, each stream from its own session: every answer is the
// recorded one and every recorded call is used by its own trace.
func TestGRPCRecordedByTheAgent(t *testing.T) {
	const n = 32
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst := dl.Addr().String()
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, &grpctest.Service{})
	healthpb.RegisterHealthServer(gs, healthServing{})
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(dl) }()

	rec, store := newRecorder(t)
	undo, err := hook.Install(hook.Config{Mode: hook.Record, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(dst, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	front := serveFront(t, cc)
	want := frontCalls(t, front, n, nil)
	cc.Close()
	undo()
	if err := rec.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	gs.Stop()
	<-done

	var sessions []*recording.Session
	ids := map[string]string{}
	err = store.Scan(ctx, func(s *recording.Session) error {
		if s.Inbound.Proto != recording.ProtoHTTP {
			return nil // the in-process downstream's own sessions, and background ones
		}
		tag := tagOf(string(s.Inbound.Request))
		ids[tag] = s.ID
		sessions = append(sessions, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != n {
		t.Fatalf("%d sessions recorded", len(sessions))
	}
	for _, s := range sessions {
		if len(s.Calls) != 7 { // grpcCalls: five of Exercise, client streaming, unary
			t.Fatalf("%s: %d calls recorded", s.ID, len(s.Calls))
		}
	}

	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	undo, err = hook.Install(hook.Config{Mode: hook.Replay, MockAddr: srv.Addr(), NoClock: true,
		Passthrough: []string{strings.TrimPrefix(srv.AdminURL(), "http://"), sl.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer undo()
	cc2, err := grpc.NewClient(dst, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	hs := &http.Server{Handler: frontHandler(cc2)}
	go func() { _ = hs.Serve(sl) }()
	defer hs.Close()
	got := frontCalls(t, sl.Addr().String(), n, ids)
	for tag, w := range want {
		if got[tag] != w {
			t.Errorf("%s: replayed %q, recorded %q", tag, got[tag], w)
		}
	}
	for _, s := range sessions {
		r := traceReport(t, srv, s.ID)
		if len(r.Unused) != 0 || len(r.Calls) != len(s.Calls) {
			t.Errorf("%s: %d calls observed of %d, %d recorded calls unused", s.ID, len(r.Calls), len(s.Calls), len(r.Unused))
		}
	}
}

// newRecorder returns a recorder of every request, writing to a
// directory store.
func newRecorder(t *testing.T) (*capture.Recorder, *recording.DirStore) {
	t.Helper()
	store, err := recording.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	smp, _ := recording.NewSampler(1)
	pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: store, Sampler: smp})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := capture.New(capture.Config{Pipeline: pipe, App: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	return rec, store
}

// frontHandler answers /call?tag=T with what the gRPC calls of T
// answered (grpcCalls).
func frontHandler(cc *grpc.ClientConn) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := grpcCalls(r.Context(), cc, r.URL.Query().Get("tag"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprint(w, s)
	})
}

func serveFront(t *testing.T, cc *grpc.ClientConn) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: frontHandler(cc)}
	go func() { _ = hs.Serve(l) }()
	t.Cleanup(func() { _ = hs.Close() })
	return l.Addr().String()
}

func tagOf(request string) string {
	line, _, _ := strings.Cut(request, "\r\n")
	_, tag, _ := strings.Cut(line, "tag=")
	tag, _, _ = strings.Cut(tag, " ")
	return tag
}

// frontCalls sends n requests at once on raw connections (written past
// the hooks, as the replayer's are), with Retrace-Trace-Id from ids when
// given, and returns the answers by tag.
func frontCalls(t *testing.T, addr string, n int, ids map[string]string) map[string]string {
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tag := fmt.Sprintf("front-%02d", i)
			rc, err := agenttest.DialRaw(addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer rc.Close()
			var hdr []string
			if ids != nil {
				hdr = append(hdr, hook.TraceHeader+": "+ids[tag])
			}
			code, body, err := rc.Get("/call?tag="+tag, hdr...)
			if err != nil || code != http.StatusOK {
				t.Errorf("%s: %d %s %v", tag, code, body, err)
				return
			}
			mu.Lock()
			got[tag] = string(body)
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}
