// Package storetest checks what every recording.Store must do, for the
// tests of the stores in their own packages (directory, Redis, blob).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/recording"
)

// Session returns a session with text and binary payloads and two calls.
func Session(id string) *recording.Session {
	return &recording.Session{
		V: recording.SchemaVersion, ID: id, App: "orders",
		At: time.Date(2026, 11, 29, 10, 15, 23, 123456789, time.UTC),
		Inbound: recording.Inbound{Proto: "http", Local: "127.0.0.1:8080", Remote: "127.0.0.1:51432",
			Request:  []byte("POST /orders HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"),
			Response: []byte("HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"),
			DurNs:    5234000},
		Calls: []recording.Call{
			{Seq: 0, Proto: "redis", Dst: "127.0.0.1:6379", Request: []byte("*2\r\n$3\r\nGET\r\n$5\r\nstock\r\n"),
				Response: []byte("$2\r\n42\r\n"), StartNs: 812000, DurNs: 95000},
			{Seq: 1, Proto: "mysql", Dst: "127.0.0.1:3306", Setup: true, Conn: 3,
				Request: []byte{0x20, 0, 0, 1, 0xff, 0xfe, 0x00}, Response: []byte{7, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0},
				StartNs: 900000, DurNs: 1000, ResponseTruncated: true},
		},
	}
}

// Sessions returns n sessions PREFIX0000… a millisecond apart.
func Sessions(n int, prefix string) []*recording.Session {
	out := make([]*recording.Session, n)
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for i := range out {
		s := Session(fmt.Sprintf("%s%04d", prefix, i))
		s.At = base.Add(time.Duration(i) * time.Millisecond)
		out[i] = s
	}
	return out
}

// ScanIDs returns the ids of every session r scans, in its order.
func ScanIDs(t testing.TB, r recording.Reader) []string {
	t.Helper()
	var ids []string
	require.NoError(t, r.Scan(context.Background(), func(s *recording.Session) error {
		ids = append(ids, s.ID)
		return nil
	}))
	return ids
}

// IDs returns the ids of ss.
func IDs(ss []*recording.Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

// ErrLog collects the errors reported to a store's error handler (Add).
type ErrLog struct {
	mu   sync.Mutex
	errs []error
}

// Add records err; pass it to recording.WithErrorHandler.
func (l *ErrLog) Add(err error) { l.mu.Lock(); l.errs = append(l.errs, err); l.mu.Unlock() }

// All returns the errors so far.
func (l *ErrLog) All() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// Contract checks what every Store must do, and closes st.
func Contract(t *testing.T, st recording.Store) {
	ctx := context.Background()
	in := Sessions(25, "c")
	for i := 0; i < len(in); i += 10 {
		require.NoError(t, st.Write(ctx, in[i:min(i+10, len(in))]))
	}
	require.NoError(t, st.Flush(ctx))
	assert.Equal(t, IDs(in), ScanIDs(t, st), "Scan returns every session in time order")

	got, err := st.Get(ctx, "c0017")
	require.NoError(t, err)
	assert.Equal(t, in[17], got)

	_, err = st.Get(ctx, "nope")
	assert.ErrorIs(t, err, recording.ErrNotFound)

	n := 0
	require.NoError(t, st.Scan(ctx, func(*recording.Session) error { n++; return recording.ErrStop }))
	assert.Equal(t, 1, n, "ErrStop ends the scan")

	boom := errors.New("boom")
	assert.ErrorIs(t, st.Scan(ctx, func(*recording.Session) error { return boom }), boom)

	require.NoError(t, st.Close())
	require.NoError(t, st.Close(), "Close twice")
}

// SharedTrace checks that sessions of one distributed trace (one Trace,
// each its own id) are all kept, and that writing a session again does not
// duplicate or replace it. It closes st.
func SharedTrace(t *testing.T, st recording.Store) {
	ctx := context.Background()
	const tp = "4bf92f3577b34da6a3ce929d0e0e4736"
	in := Sessions(3, "t")
	for _, s := range in {
		s.Trace = tp
		require.NoError(t, st.Write(ctx, []*recording.Session{s}))
	}
	require.NoError(t, st.Flush(ctx))
	var got []*recording.Session
	require.NoError(t, st.Scan(ctx, func(s *recording.Session) error { got = append(got, s); return nil }))
	require.Len(t, got, 3, "every session of the trace is kept")
	for i, s := range got {
		assert.Equal(t, in[i].ID, s.ID)
		assert.Equal(t, tp, s.Trace)
	}
	require.NoError(t, st.Close())
}
