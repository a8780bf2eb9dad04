package mockserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
)

// lazyClose runs, under traces a and b, the choreography in which
// database/sql sends a's COM_STMT_CLOSE from b's goroutine: a's statement
// is closed while b holds the pool's only connection, so the close waits
// for b to release it.
func lazyClose(t *testing.T, db *sql.DB, a, b string, id int) {
	t.Helper()
	ctx := context.Background()
	undoA := mocktest.Bind(a)
	stmt, err := db.PrepareContext(ctx, "SELECT v FROM t WHERE id = ?")
	if err != nil {
		t.Fatal(err)
	}
	var v string
	if err := stmt.QueryRowContext(ctx, id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	undoA()
	connB := make(chan *sql.Conn)
	released := make(chan struct{})
	go func() {
		defer mocktest.Bind(b)()
		c, err := db.Conn(ctx)
		if err != nil {
			t.Error(err)
			close(connB)
			return
		}
		connB <- c
		<-released
		var n int
		if err := c.QueryRowContext(ctx, fmt.Sprintf("SELECT %d", id)).Scan(&n); err != nil {
			t.Error(err)
		}
		c.Close() // database/sql runs a's pending close here, on b's goroutine
		close(connB)
	}()
	<-connB
	defer mocktest.Bind(a)()
	stmt.Close() // the connection is b's: the close is deferred
	close(released)
	<-connB
}

// TestMySQLCloseChargedToItsStatement: a COM_STMT_CLOSE that database/sql
// sends from another request's goroutine is charged by the mock server to
// the trace that prepared the statement on that connection.
func TestMySQLCloseChargedToItsStatement(t *testing.T) {
	dbName, _ := scratchDB(t, 1)
	rec := mocktest.NewRecorder()
	tag := randHex(4)
	a, b := "close-a-"+tag, "close-b-"+tag
	realDB := mysqlDB(t, rec.Dialer("mysql", ""), dbName, 1)
	lazyClose(t, realDB, a, b, 1)
	realDB.Close()
	sessions := map[string]*recording.Session{}
	for _, s := range rec.Sessions() {
		sessions[s.ID] = s
	}
	// The test recorder charges the close to b, its writer; record mode
	// charges it to a, whose statement it closes (recording/capture).
	var kept []recording.Call
	for _, c := range sessions[b].Calls {
		if cmds := mysqlCmds(c.Request); len(cmds) == 1 && cmds[0] == 0x19 {
			c.Seq, c.Conn = len(sessions[a].Calls), sessions[a].Calls[len(sessions[a].Calls)-1].Conn
			sessions[a].Calls = append(sessions[a].Calls, c)
			continue
		}
		kept = append(kept, c)
	}
	if len(kept) == len(sessions[b].Calls) {
		t.Fatalf("the recording has no close written by %s: the choreography did not run", b)
	}
	sessions[b].Calls = kept

	srv := mocktest.NewServer(t, mockserver.Config{}, sessions[a], sessions[b])
	d := &mocktest.Dialer{Mock: srv.Addr()}
	lazyClose(t, mysqlDB(t, d.DialContext, dbName, 1), a, b, 1)
	closes := func(tid string) (n int, problems []string) {
		for _, c := range report(t, srv, tid).Calls {
			if cmds := mysqlCmds(c.Request); len(cmds) == 1 && cmds[0] == 0x19 {
				if c.Matched < 0 {
					problems = append(problems, "close not matched: "+c.Error)
				}
				if c.Statement != "SELECT v FROM t WHERE id = ?" {
					problems = append(problems, fmt.Sprintf("the close's statement is reported as %q", c.Statement))
				}
				n++
			}
		}
		return n, problems
	}
	// COM_STMT_CLOSE has no answer: the client is done when it has written
	// it, and the mock server may not have read it yet.
	var n int
	var problems []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if n, problems = closes(a); n > 0 {
			break
		}
	}
	if n != 1 || len(problems) > 0 {
		t.Errorf("trace %s (prepared the statement): %d closes observed, want 1 (%v)", a, n, problems)
	}
	if n, _ := closes(b); n != 0 {
		t.Errorf("trace %s (only wrote the close): %d closes observed, want 0", b, n)
	}
}
