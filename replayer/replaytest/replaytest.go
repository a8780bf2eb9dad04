// Package replaytest has helpers for tests of regression replay: recorded
// sessions built from plain values, JSONL recordings on disk, and an
// in-process stand-in for the mock server (answers downstream calls from
// the recording in recorded order and serves the admin API of
// mockserver/api.go), for tests that do not need the real mock server.
package replaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
)

// HTTPRequest renders a raw HTTP/1.1 request with a Content-Length body.
func HTTPRequest(method, target, host, body string, headers ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, host)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if body != "" || method == "POST" || method == "PUT" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n" + body)
	return []byte(b.String())
}

// HTTPResponse renders a raw HTTP/1.1 response with a Content-Length body.
func HTTPResponse(status int, body string, headers ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return []byte(b.String())
}

// Session builds a recorded session; calls get Seq in order.
func Session(id string, at time.Time, request, response []byte, calls ...recording.Call) *recording.Session {
	for i := range calls {
		calls[i].Seq = i
	}
	return &recording.Session{V: recording.SchemaVersion, ID: id, App: "test", At: at,
		Inbound: recording.Inbound{Proto: "http", Request: request, Response: response, DurNs: 1e6},
		Calls:   calls}
}

// WriteStore writes sessions into a directory store (recording.Open) at
// dir, the form --recordings reads.
func WriteStore(t testing.TB, dir string, sessions ...*recording.Session) {
	t.Helper()
	st, err := recording.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Write(context.Background(), sessions); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// Mock answers downstream calls of traced requests from recordings, in
// recorded order per destination, and serves the mock server's admin API
// at URL. Tests whose target service runs in-process call Call where the
// agent would have redirected a connection.
type Mock struct {
	URL string
	srv *httptest.Server

	mu         sync.Mutex
	recordings map[string]*recording.Session
	aliases    map[string]string
	traces     map[string]*traceState
}

type traceState struct {
	calls []mockserver.ObservedCall
	used  map[int]bool
}

// NewMock starts a Mock serving sessions; it is closed by t.Cleanup.
func NewMock(t testing.TB, sessions ...*recording.Session) *Mock {
	m := &Mock{recordings: map[string]*recording.Session{}, aliases: map[string]string{}, traces: map[string]*traceState{}}
	for _, s := range sessions {
		m.recordings[s.ID] = s
	}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serveAdmin))
	m.URL = m.srv.URL
	t.Cleanup(m.srv.Close)
	return m
}

func (m *Mock) resolve(trace string) *recording.Session {
	if id, ok := m.aliases[trace]; ok {
		return m.recordings[id]
	}
	return m.recordings[trace]
}

// Call answers one downstream request made for trace, as the mock server
// would: the next unused recorded call to dst, in recorded order. ok is
// false when no recorded call is left (a missing mock).
func (m *Mock) Call(trace, proto, dst string, req []byte) (resp []byte, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ts := m.traces[trace]
	if ts == nil {
		ts = &traceState{used: map[int]bool{}}
		m.traces[trace] = ts
	}
	oc := mockserver.ObservedCall{Seq: len(ts.calls), Proto: proto, Dst: dst, Request: append([]byte(nil), req...), Matched: -1}
	if s := m.resolve(trace); s != nil {
		for _, c := range s.Calls {
			if c.Dst == dst && !c.Setup && !ts.used[c.Seq] {
				ts.used[c.Seq] = true
				oc.Matched, oc.Strategy, oc.Score = c.Seq, "order", 1
				resp, ok = c.Response, true
				break
			}
		}
	}
	if !ok {
		oc.Error = "no recorded call left for " + dst
	}
	ts.calls = append(ts.calls, oc)
	return resp, ok
}

// Traces returns how many traces the mock holds state for (tests check
// that the runner forgets what it registered).
func (m *Mock) Traces() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.traces) + len(m.aliases)
}

func (m *Mock) serveAdmin(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/traces":
		var a mockserver.Alias
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil || a.Trace == "" {
			http.Error(w, "bad alias", http.StatusBadRequest)
			return
		}
		if m.recordings[a.Recording] == nil {
			http.Error(w, "no recording "+a.Recording, http.StatusNotFound)
			return
		}
		m.aliases[a.Trace] = a.Recording
		w.WriteHeader(http.StatusNoContent)
	case strings.HasPrefix(r.URL.Path, "/traces/"):
		trace := strings.TrimPrefix(r.URL.Path, "/traces/")
		switch r.Method {
		case http.MethodGet:
			rep := mockserver.TraceReport{Trace: trace, Calls: []mockserver.ObservedCall{}, Unused: []recording.Call{}}
			ts := m.traces[trace]
			if ts != nil {
				rep.Calls = ts.calls
			}
			if s := m.resolve(trace); s != nil {
				rep.Recording = s.ID
				for _, c := range s.Calls {
					if !c.Setup && (ts == nil || !ts.used[c.Seq]) {
						rep.Unused = append(rep.Unused, c)
					}
				}
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(rep)
		case http.MethodDelete:
			delete(m.traces, trace)
			delete(m.aliases, trace)
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	case r.URL.Path == "/healthz":
		fmt.Fprintf(w, `{"ok":true,"sessions":%d}`, len(m.recordings))
	default:
		http.NotFound(w, r)
	}
}
