package capture_test

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// countingConnector counts the connections opened with no trace on the
// opening goroutine: database/sql's connectionOpener, or a warm-up before
// any request.
type countingConnector struct {
	driver.Connector
	untraced, traced atomic.Int64
}

func (c *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if trace.CurrentID() == "" {
		c.untraced.Add(1)
	} else {
		c.traced.Add(1)
	}
	return c.Connector.Connect(ctx)
}

type lookup struct {
	db    *sql.DB
	table string
}

func (l *lookup) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	var n int
	if err := l.db.QueryRowContext(r.Context(), "SELECT COUNT(*) FROM "+l.table+" WHERE id = ?", id).Scan(&n); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "%s %d", id, n)
}

// TestPoolOpenedConnectionsAreMySQL records requests served from a pool
// whose connections are opened with no trace — before any request (a
// warm-up), and by database/sql's connectionOpener goroutine for requests
// waiting on a capped pool whose connections expire. Every call on every
// MySQL connection must be recorded as "mysql", and each connection's
// greeting and handshake must be set-up calls of the session that first
// used it, so that replay can answer them.
func TestPoolOpenedConnectionsAreMySQL(t *testing.T) {
	t.Run("direct", func(t *testing.T) { testPoolOpened(t, false) })
	// go-mysql-server (the demo's MySQL) writes the greeting's header and
	// body with two system calls: the client may read the 4-byte header
	// alone, and the body in the next read.
	t.Run("greeting split", func(t *testing.T) { testPoolOpened(t, true) })
}

func testPoolOpened(t *testing.T, split bool) {
	dsn := testenv.MySQLDSN(t)
	table := createTable(t, dsn)
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	if split {
		cfg.Addr = splitGreetingProxy(t, cfg.Addr)
	}
	// a session variable: the driver sets it with a query of its own
	// right after authentication, on the goroutine that opens the
	// connection
	cfg.Params = map[string]string{"time_zone": "'+00:00'"}
	rec, store := installRecorder(t, "opener", *sampler(t, 1))

	mc, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	conn := &countingConnector{Connector: mc}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(3)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(5 * time.Millisecond)
	// warm-up: connections opened before any request
	require.NoError(t, db.PingContext(context.Background()))

	addr := serveDB(t, &lookup{db: db, table: table}, db)
	const clients, rounds = 24, 10
	lookupUsers(t, addr, clients, rounds)
	settle(t, rec)
	require.Positive(t, conn.untraced.Load()-1, "no connection was opened by database/sql's opener: the test shows nothing")

	type connSeen struct {
		session          string // of the greeting
		greeting, handsh bool
		params           bool
		first            string // the session of the connection's first command
		firstAt          time.Time
	}
	conns := map[int64]*connSeen{}
	var sessions, notMySQL int
	require.NoError(t, store.Scan(context.Background(), func(s *recording.Session) error {
		if s.Inbound.Local != addr {
			return nil
		}
		sessions++
		for _, call := range s.Calls {
			if call.Dst != cfg.Addr {
				continue
			}
			if call.Proto != "mysql" {
				notMySQL++
				if notMySQL <= 3 {
					t.Errorf("session %s: call %d on connection %d recorded as %q, not mysql", s.ID, call.Seq, call.Conn, call.Proto)
				}
			}
			cs := conns[call.Conn]
			if cs == nil {
				cs = &connSeen{}
				conns[call.Conn] = cs
			}
			if !call.Setup {
				if at := s.At.Add(time.Duration(call.StartNs)); cs.first == "" || at.Before(cs.firstAt) {
					cs.first, cs.firstAt = s.ID, at
				}
				continue
			}
			if len(call.Request) == 0 && len(call.Response) > 4 && call.Response[4] == 10 {
				assert.False(t, cs.greeting, "connection %d: two greetings", call.Conn)
				cs.greeting = true
				cs.session = s.ID
			} else if cs.greeting && !cs.handsh && cs.session == s.ID {
				cs.handsh = true
				if n := len(mysqlPackets(call.Response)); n != 1 {
					t.Errorf("session %s connection %d: the handshake response has %d answer packets, want 1 (the OK)", s.ID, call.Conn, n)
				}
			} else if cs.handsh && cs.session == s.ID && bytes.Contains(call.Request, []byte("SET time_zone")) {
				cs.params = true
			}
		}
		return nil
	}))
	assert.Equal(t, clients*rounds, sessions)
	assert.Zero(t, notMySQL, "MySQL calls recorded as another protocol")
	for id, cs := range conns {
		assert.True(t, cs.greeting, "connection %d: no greeting recorded", id)
		assert.Equal(t, cs.first, cs.session, "connection %d: the greeting is not in the session that used it first", id)
		assert.True(t, cs.handsh, "connection %d: no handshake response recorded after the greeting", id)
		assert.True(t, cs.params, "connection %d: the driver's SET time_zone is not a set-up call of its first session", id)
	}
	t.Logf("%d sessions on %d MySQL connections; %d opened with no trace, %d by a request",
		sessions, len(conns), conn.untraced.Load(), conn.traced.Load())
}

// splitGreetingProxy forwards connections to addr (its own traffic carries
// no trace: the recorder keeps none of it); the server's first bytes on
// each connection — the MySQL greeting — reach the client as two writes,
// the packet header and, a moment later, the rest.
func splitGreetingProxy(t *testing.T, addr string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(s, c)
				s.Close()
			})
			wg.Go(func() {
				defer s.Close()
				b := make([]byte, 4096)
				n, err := io.ReadAtLeast(s, b, 5)
				if err != nil {
					c.Close()
					return
				}
				if _, err := c.Write(b[:4]); err != nil {
					return
				}
				time.Sleep(2 * time.Millisecond) // the client reads the header alone
				if _, err := c.Write(b[4:n]); err != nil {
					return
				}
				_, _ = io.Copy(c, s)
				c.Close()
			})
		}
	})
	return ln.Addr().String()
}
