package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/recording"
)

func writeRecordings(t *testing.T, dir string) {
	t.Helper()
	st, err := recording.NewDirStore(dir)
	require.NoError(t, err)
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for i, id := range []string{"a1", "b2"} {
		require.NoError(t, st.Write(context.Background(), []*recording.Session{{ID: id, App: "orders", At: at.Add(time.Duration(i) * time.Second),
			Inbound: recording.Inbound{Proto: "http", Request: []byte("GET /x HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\n\r\n"), DurNs: 1500},
			Calls:   []recording.Call{{Proto: "redis", Dst: "127.0.0.1:6379", Request: []byte("*1\r\n$4\r\nPING\r\n"), Response: []byte("+PONG\r\n"), Setup: true}}}}))
	}
	require.NoError(t, st.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sessions-20991231T000000Z-0001.jsonl"), []byte("{bad\n"), 0o644))
}

func runRecordingsCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	p := &proc{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code := run(context.Background(), p, append([]string{"recordings"}, args...))
	return code, out.String(), errb.String()
}

func TestRecordingsCommand(t *testing.T) {
	dir := t.TempDir()
	writeRecordings(t, dir)

	code, out, errs := runRecordingsCmd(t, dir)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "sessions  2 (2026-11-29T10:00:00Z … 2026-11-29T10:00:01Z)")
	assert.Contains(t, out, "calls     2 (2 set-up)")
	assert.Contains(t, out, "skipped   1 lines")
	assert.Contains(t, errs, "sessions-20991231T000000Z-0001.jsonl:1: skipped", "bad lines are reported with file and line")

	code, out, _ = runRecordingsCmd(t, "--json", dir)
	require.Equal(t, 0, code)
	var sum recording.Summary
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	assert.Equal(t, 2, sum.Sessions)

	code, out, _ = runRecordingsCmd(t, "--list", dir)
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], "a1  GET /x HTTP/1.1")
	assert.Contains(t, lines[0], "HTTP/1.1 200 OK")

	code, out, _ = runRecordingsCmd(t, "--id", "b2", "file://"+dir)
	require.Equal(t, 0, code)
	assert.Contains(t, out, `"id": "b2"`)

	dst := filepath.Join(t.TempDir(), "copy")
	code, out, errs = runRecordingsCmd(t, "--copy", dst, "--gzip", dir)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "copied 2 sessions")
	files, _ := filepath.Glob(filepath.Join(dst, "sessions-*.jsonl.gz"))
	assert.Len(t, files, 1)
}

func TestRecordingsCommandErrors(t *testing.T) {
	dir := t.TempDir()
	writeRecordings(t, dir)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no source", nil, 2, "want one recordings source"},
		{"two modes", []string{"--list", "--id", "x", dir}, 2, "exclude each other"},
		{"unknown id", []string{"--id", "zz", dir}, 1, `session not found: id "zz"`},
		{"bad store", []string{"nosuch://x"}, 2, "nosuch"},
		{"missing directory", []string{filepath.Join(dir, "nope")}, 2, "nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errs := runRecordingsCmd(t, tc.args...)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, errs, tc.want)
		})
	}
}

// --trace lists every session of a distributed trace (their own ids, one
// W3C trace id).
func TestRecordingsTrace(t *testing.T) {
	dir := t.TempDir()
	st, err := recording.NewDirStore(dir)
	require.NoError(t, err)
	const tp = "4bf92f3577b34da6a3ce929d0e0e4736"
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for i, id := range []string{"s1", "s2", "s3", "other"} {
		s := &recording.Session{ID: id, Trace: tp, At: at.Add(time.Duration(i) * time.Second),
			Inbound: recording.Inbound{Proto: "http", Request: []byte("GET /x HTTP/1.1\r\n\r\n"), Response: []byte("HTTP/1.1 200 OK\r\n\r\n")}}
		if id == "other" {
			s.Trace = "0af7651916cd43dd8448eb211c80319c"
		}
		require.NoError(t, st.Write(context.Background(), []*recording.Session{s}))
	}
	require.NoError(t, st.Close())
	code, out, errs := runRecordingsCmd(t, "--trace", strings.ToUpper(tp), dir)
	require.Equal(t, 0, code, errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3)
	for i, id := range []string{"s1", "s2", "s3"} {
		assert.Contains(t, lines[i], "  "+id+"  ")
	}
	code, _, errs = runRecordingsCmd(t, "--trace", "00000000000000000000000000000001", dir)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errs, "no session of trace")
}

// A gzip file cut short is reported with its file and the sessions read;
// a source that does not exist is an error.
func TestRecordingsDamagedAndMissing(t *testing.T) {
	dir := t.TempDir()
	st, err := recording.NewDirStore(dir, recording.WithGzip(true))
	require.NoError(t, err)
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for i := range 100 {
		require.NoError(t, st.Write(context.Background(), []*recording.Session{{ID: fmt.Sprint("g", i), At: at,
			Inbound: recording.Inbound{Proto: "http", Request: []byte(fmt.Sprintf("GET /%d HTTP/1.1\r\n\r\n", i))}}}))
		if i%10 == 9 {
			require.NoError(t, st.Flush(context.Background()))
		}
	}
	require.NoError(t, st.Close())
	files, _ := filepath.Glob(filepath.Join(dir, "sessions-*.jsonl.gz"))
	require.Len(t, files, 1)
	b, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(files[0], b[:len(b)/2], 0o600))

	code, out, errs := runRecordingsCmd(t, dir)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, filepath.Base(files[0]))
	assert.Contains(t, errs, "truncated or corrupt gzip data after")
	assert.NotContains(t, out, "sessions  100")

	code, _, errs = runRecordingsCmd(t, filepath.Join(dir, "nope"))
	assert.NotEqual(t, 0, code, "a source that does not exist is an error")
	assert.Contains(t, errs, "nope")
}
