package recording

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errLog collects errors reported to a store's error handler.
type errLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errLog) add(err error) { l.mu.Lock(); l.errs = append(l.errs, err); l.mu.Unlock() }
func (l *errLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func sessions(n int, prefix string) []*Session {
	out := make([]*Session, n)
	base := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for i := range out {
		s := sampleSession(fmt.Sprintf("%s%04d", prefix, i))
		s.At = base.Add(time.Duration(i) * time.Millisecond)
		out[i] = s
	}
	return out
}

func scanIDs(t *testing.T, r Reader) []string {
	t.Helper()
	var ids []string
	require.NoError(t, r.Scan(context.Background(), func(s *Session) error {
		ids = append(ids, s.ID)
		return nil
	}))
	return ids
}

func ids(ss []*Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func TestDirStoreRotatesBySize(t *testing.T) {
	dir := t.TempDir()
	line, err := Marshal(sessions(2, "s")[1]) // the longest: its time has a fraction
	require.NoError(t, err)
	st, err := NewDirStore(dir, WithRotateBytes(int64(3*(len(line)+1))))
	require.NoError(t, err)
	require.NoError(t, st.Write(context.Background(), sessions(10, "s")))
	require.NoError(t, st.Close())
	files, err := st.Files()
	require.NoError(t, err)
	assert.Len(t, files, 4, "3 sessions per file")
	assert.Len(t, scanIDs(t, st), 10)
}

func TestDirStoreSkipsBadLines(t *testing.T) {
	dir := t.TempDir()
	good := func(id string) string {
		b, err := Marshal(sampleSession(id))
		require.NoError(t, err)
		return string(b)
	}
	long := `{"v":1,"id":"long","app":"` + strings.Repeat("x", 2000) + `"}`
	content := strings.Join([]string{good("a"), `{"v":1,"id":`, "", good("b"), long, `not json`, good("c")}, "\n") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sessions-20261129T101523Z-0001.jsonl"), []byte(content), 0o644))
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write([]byte(good("d") + "\n{bad\n"))
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sessions-20261129T101524Z-0001.jsonl.gz"), zb.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("ignored"), 0o644))

	var log errLog
	st, err := NewDirStore(dir, WithErrorHandler(log.add), WithMaxLine(1000))
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c", "d"}, scanIDs(t, st))
	assert.EqualValues(t, 4, st.Skipped())
	errs := log.all()
	require.Len(t, errs, 4)
	var want []string
	for _, e := range errs {
		var bl *BadLineError
		require.ErrorAs(t, e, &bl)
		want = append(want, fmt.Sprintf("%s:%d", filepath.Base(bl.Source), bl.Line))
	}
	assert.Equal(t, []string{
		"sessions-20261129T101523Z-0001.jsonl:2",
		"sessions-20261129T101523Z-0001.jsonl:5",
		"sessions-20261129T101523Z-0001.jsonl:6",
		"sessions-20261129T101524Z-0001.jsonl.gz:2",
	}, want)
	assert.Contains(t, errs[1].Error(), "longer than 1000 bytes")
}

func TestDirStoreFlushMakesLinesVisible(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			var log errLog
			st, err := NewDirStore(t.TempDir(), WithGzip(gz), WithErrorHandler(log.add))
			require.NoError(t, err)
			defer st.Close()
			require.NoError(t, st.Write(context.Background(), sessions(3, "f")))
			require.NoError(t, st.Flush(context.Background()))
			assert.Len(t, scanIDs(t, st), 3, "flushed sessions of an open file are readable")
			for _, e := range log.all() {
				var bl *BadLineError
				assert.False(t, errors.As(e, &bl), "no line of an open file is reported bad: %v", e)
			}
		})
	}
}

func TestOpenURLs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	tests := []struct {
		url  string
		kind string
	}{
		{dir, "*recording.DirStore"},
		{"file://" + dir, "*recording.DirStore"},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			st, err := Open(ctx, tc.url)
			require.NoError(t, err)
			assert.Equal(t, tc.kind, fmt.Sprintf("%T", st))
			require.NoError(t, st.Close())
		})
	}
	for _, bad := range []string{"", "file://", "nosuch://x"} {
		_, err := Open(ctx, bad)
		assert.Error(t, err, bad)
	}
}

func BenchmarkDirStoreWrite(b *testing.B) {
	for _, gz := range []bool{false, true} {
		b.Run(fmt.Sprintf("gzip=%v", gz), func(b *testing.B) {
			st, err := NewDirStore(b.TempDir(), WithGzip(gz))
			require.NoError(b, err)
			batch := sessions(64, "b")
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := st.Write(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			require.NoError(b, st.Close())
			b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "sessions/s")
		})
	}
}

func TestSummarizeAndCopy(t *testing.T) {
	ctx := context.Background()
	src, err := NewDirStore(t.TempDir(), WithErrorHandler(func(error) {}))
	require.NoError(t, err)
	in := sessions(5, "y")
	in[2].Calls[0].RequestTruncated = true
	require.NoError(t, src.Write(ctx, in))
	require.NoError(t, src.Close())
	f, err := os.OpenFile(filepath.Join(src.Dir(), "sessions-20991231T000000Z-0001.jsonl"), os.O_CREATE|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	_, _ = f.WriteString("{broken\n")
	require.NoError(t, f.Close())

	sum, err := Summarize(ctx, src)
	require.NoError(t, err)
	assert.Equal(t, 5, sum.Sessions)
	assert.Equal(t, 10, sum.Calls)
	assert.Equal(t, 5, sum.SetupCalls)
	assert.Equal(t, map[string]int{"redis": 5, "mysql": 5}, sum.ByProto)
	assert.Equal(t, map[string]int{"orders": 5}, sum.Apps)
	assert.Equal(t, 5, sum.Truncated, "every sample session has a truncated call")
	assert.EqualValues(t, 1, sum.Skipped)
	assert.Equal(t, in[0].At, sum.First)
	assert.Equal(t, in[4].At, sum.Last)
	assert.Equal(t, "POST /orders HTTP/1.1", in[0].RequestLine())
	assert.Equal(t, "HTTP/1.1 201 Created", in[0].StatusLine())

	dst, err := Open(ctx, t.TempDir())
	require.NoError(t, err)
	n, err := Copy(ctx, dst, src)
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	assert.Equal(t, ids(in), scanIDs(t, dst))
	require.NoError(t, dst.Close())
}

func TestDirStoreGetIndex(t *testing.T) {
	ctx := context.Background()
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			dir := t.TempDir()
			w, err := NewDirStore(dir, WithGzip(gz), WithRotateSessions(4))
			require.NoError(t, err)
			defer w.Close()
			require.NoError(t, w.Write(ctx, sessions(10, "g")))
			require.NoError(t, w.Flush(ctx))
			r, err := NewDirStore(dir, WithErrorHandler(func(error) {}))
			require.NoError(t, err)
			for _, id := range []string{"g0000", "g0005", "g0009"} {
				s, err := r.Get(ctx, id)
				require.NoError(t, err)
				assert.Equal(t, id, s.ID)
			}
			_, err = r.Get(ctx, "g0010")
			require.ErrorIs(t, err, ErrNotFound)
			// written after the index was built: found by the refresh
			more := sessions(12, "g")[10:]
			require.NoError(t, w.Write(ctx, more))
			require.NoError(t, w.Flush(ctx))
			s, err := r.Get(ctx, "g0011")
			require.NoError(t, err)
			assert.Equal(t, "g0011", s.ID)
			assert.Len(t, r.index.ids, 12)
		})
	}
}

func TestDirStoreGetIndexSkipsBadAndLongLines(t *testing.T) {
	dir := t.TempDir()
	good := func(id string) string {
		b, err := Marshal(sampleSession(id))
		require.NoError(t, err)
		return string(b)
	}
	long := `{"v":1,"id":"long","app":"` + strings.Repeat("x", 3000) + `"}`
	content := strings.Join([]string{good("a"), "{bad", long, good("b")}, "\r\n") + "\n" + good("partial")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sessions-20261129T101523Z-0001.jsonl"), []byte(content), 0o644))
	st, err := NewDirStore(dir, WithMaxLine(2000), WithErrorHandler(func(error) {}))
	require.NoError(t, err)
	for _, id := range []string{"a", "b"} {
		s, err := st.Get(context.Background(), id)
		require.NoError(t, err, id)
		assert.Equal(t, id, s.ID)
	}
	for _, id := range []string{"long", "partial"} {
		_, err := st.Get(context.Background(), id)
		assert.ErrorIs(t, err, ErrNotFound, "%s: too long, or not ended by a newline yet", id)
	}
}

func BenchmarkDirStoreGet(b *testing.B) {
	ctx := context.Background()
	st, err := NewDirStore(b.TempDir())
	require.NoError(b, err)
	require.NoError(b, st.Write(ctx, sessions(5000, "b")))
	require.NoError(b, st.Flush(ctx))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := st.Get(ctx, fmt.Sprintf("b%04d", i%5000)); err != nil {
			b.Fatal(err)
		}
	}
}
