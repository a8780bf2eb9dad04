package capture_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
)

// userLookup serves each request as the orders example's user lookup
// does: an explicitly prepared statement (db.PrepareContext), one query,
// and a deferred stmt.Close. The pool is far smaller than the number of
// concurrent requests, so the query's connection is handed to a waiting
// request before Close runs; database/sql then sends the COM_STMT_CLOSE
// from that other request's goroutine when it releases the connection.
type userLookup struct {
	db    *sql.DB
	table string
}

func (u *userLookup) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	stmt, err := u.db.PrepareContext(r.Context(), "SELECT COUNT(*) FROM "+u.table+" WHERE id = ?")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer stmt.Close()
	var n int
	if err := stmt.QueryRowContext(r.Context(), id).Scan(&n); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "%s %d", id, n)
}

// TestStmtCloseChargedToItsStatement records concurrent requests whose
// prepared statements are closed lazily on pooled connections: every
// COM_STMT_CLOSE in a session must close a statement that session
// prepared on that connection — never one of another request, whose
// goroutine merely released the connection.
func TestStmtCloseChargedToItsStatement(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	table := createTable(t, dsn)
	rec, store := installRecorder(t, "stmtclose", *sampler(t, 1))

	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	addr := serveDB(t, &userLookup{db: db, table: table}, db)
	const clients, rounds = 32, 8
	lookupUsers(t, addr, clients, rounds)
	settle(t, rec)

	var sessions, closes, foreign int
	require.NoError(t, store.Scan(context.Background(), func(s *recording.Session) error {
		if s.Inbound.Local != addr {
			return nil
		}
		sessions++
		type stmtKey struct {
			conn int64
			id   uint32
		}
		prepared := map[stmtKey]bool{}
		for _, call := range s.Calls {
			if call.Proto != "mysql" || call.Setup {
				continue
			}
			for _, p := range mysqlPackets(call.Request) {
				if len(p) == 5 && p[0] == 0x19 {
					closes++
					id := binary.LittleEndian.Uint32(p[1:])
					if !prepared[stmtKey{call.Conn, id}] {
						foreign++
						t.Errorf("session %s: call %d on connection %d closes statement %d, which it did not prepare there",
							s.ID, call.Seq, call.Conn, id)
					}
				}
			}
			if ps := mysqlPackets(call.Request); len(ps) > 0 && ps[len(ps)-1][0] == 0x16 {
				if r := mysqlPackets(call.Response); len(r) > 0 && len(r[0]) >= 5 && r[0][0] == 0 {
					prepared[stmtKey{call.Conn, binary.LittleEndian.Uint32(r[0][1:5])}] = true
				}
			}
		}
		return nil
	}))
	assert.Equal(t, clients*rounds, sessions)
	assert.Positive(t, closes, "no session holds a COM_STMT_CLOSE: the test shows nothing")
	t.Logf("%d sessions, %d statement closes kept, %d charged to another request", sessions, closes, foreign)
}

// mysqlPackets returns the payloads of the complete MySQL packets in b.
func mysqlPackets(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 4 {
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		if 4+n > len(b) || n == 0 {
			break
		}
		out = append(out, b[4:4+n])
		b = b[4+n:]
	}
	return out
}
