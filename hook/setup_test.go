package hook_test

import (
	"bytes"
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/trace"
)

// writeRecorder keeps the outbound writes reported on connections to dst.
type writeRecorder struct {
	dst string

	mu     sync.Mutex
	writes map[uint64][]reportedWrite
	reads  map[uint64][]string // the trace of the reading goroutine, per read reported
	read   []byte              // the bytes of every read reported
}

type reportedWrite struct {
	tid string
	p   []byte
}

func (r *writeRecorder) StartRequest(*hook.ConnInfo, trace.RequestHead) string { return "" }
func (r *writeRecorder) InboundRead(*hook.ConnInfo, string, []byte)            {}
func (r *writeRecorder) InboundWrite(*hook.ConnInfo, string, []byte)           {}
func (r *writeRecorder) Closed(*hook.ConnInfo)                                 {}
func (r *writeRecorder) OutboundWrite(c *hook.ConnInfo, tid string, p []byte) {
	if c.Remote == r.dst {
		r.mu.Lock()
		defer r.mu.Unlock()
		appendFor(&r.writes, c.ID, reportedWrite{tid, bytes.Clone(p)})
	}
}

func (r *writeRecorder) OutboundRead(c *hook.ConnInfo, p []byte) {
	if c.Remote == r.dst {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.read = append(r.read, p...)
		appendFor(&r.reads, c.ID, trace.CurrentID())
	}
}

// appendFor appends v to the list of connection id in *m, making the map
// first if need be.
func appendFor[T any](m *map[uint64][]T, id uint64, v T) {
	if *m == nil {
		*m = map[uint64][]T{}
	}
	(*m)[id] = append((*m)[id], v)
}

// TestUntracedSetupWritesAreReported opens a MySQL connection with no
// trace on the opening goroutine, as a pool does (database/sql's
// connectionOpener, or a warm-up before any request): the driver's
// handshake response and the query setting a session variable are
// reported, with no trace, so the recorder can keep them as the
// connection's set-up; the untraced writes of later commands (requests not
// sampled) stop being reported after the first few, and so do the reads
// of their answers; a traced write and its answer are always reported.
func TestUntracedSetupWritesAreReported(t *testing.T) {
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	require.NoError(t, err)
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	rec := &writeRecorder{dst: cfg.Addr}
	install(t, hook.Config{Mode: hook.Record, Recorder: rec})

	connector, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	conn, err := db.Conn(ctx) // opened here, with no trace
	require.NoError(t, err)
	const untraced = 40
	for range untraced {
		_, err := conn.ExecContext(ctx, "DO 1")
		require.NoError(t, err)
	}
	id := trace.NewID()
	release := trace.Bind(&trace.Trace{ID: id})
	_, err = conn.ExecContext(ctx, "DO 2")
	release()
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.writes, 1, "one connection to %s", cfg.Addr)
	for _, ws := range rec.writes {
		require.NotEmpty(t, ws)
		require.Empty(t, ws[0].tid)
		require.GreaterOrEqual(t, len(ws[0].p), 5)
		require.EqualValues(t, 1, ws[0].p[3], "the first write is the handshake response (sequence 1)")
		var set, dos int
		for _, w := range ws[:len(ws)-1] {
			require.Empty(t, w.tid, "%q", w.p)
			switch {
			case bytes.Contains(w.p, []byte("SET time_zone")):
				set++
			case bytes.Contains(w.p, []byte("DO 1")):
				dos++
			}
		}
		require.Equal(t, 1, set, "the driver's SET time_zone, written with no trace, is reported")
		require.Positive(t, dos)
		require.Less(t, dos, untraced, "every untraced write is reported: unsampled traffic would all reach the recorder")
		last := ws[len(ws)-1]
		require.Equal(t, id, last.tid)
		require.Contains(t, string(last.p), "DO 2")
		t.Logf("%d writes reported: the handshake response, SET time_zone, %d of %d untraced commands, the traced one",
			len(ws), dos, untraced)
	}
	for conn, reads := range rec.reads {
		var traced, untracedReads int
		for _, tid := range reads {
			switch tid {
			case id:
				traced++
			case "":
				untracedReads++
			}
		}
		require.Positive(t, traced, "the traced command's answer is reported")
		// the greeting and each reported write's answer (an answer may
		// take more than one read), not the answers to unreported writes
		require.LessOrEqual(t, untracedReads, 2*len(rec.writes[conn]), "reads with no trace: %d", untracedReads)
		require.Less(t, untracedReads, untraced)
	}
}
