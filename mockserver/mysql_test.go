package mockserver_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
)

// mysqlWork is what one replayed request does with MySQL: a text query, a
// query with arguments (prepared, executed and closed by the driver), an
// explicitly prepared statement, an update and a transaction, all with
// values unique to the trace.
func mysqlWork(ctx context.Context, db *sql.DB, i int) (string, error) {
	id := i + 1
	var v string
	if err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT v FROM t WHERE id = %d", id)).Scan(&v); err != nil {
		return "", fmt.Errorf("text query: %w", err)
	}
	var n int64
	if _, err := db.ExecContext(ctx, "UPDATE t SET n = n + ? WHERE id = ?", 1000+i, id); err != nil {
		return "", fmt.Errorf("update: %w", err)
	}
	if err := db.QueryRowContext(ctx, "SELECT n FROM t WHERE id = ?", id).Scan(&n); err != nil {
		return "", fmt.Errorf("query with args: %w", err)
	}
	st, err := db.PrepareContext(ctx, "SELECT CONCAT(v, ':', ?) FROM t WHERE id = ?")
	if err != nil {
		return "", fmt.Errorf("prepare: %w", err)
	}
	defer st.Close()
	var c string
	if err := st.QueryRowContext(ctx, fmt.Sprintf("x%d", i), id).Scan(&c); err != nil {
		return "", fmt.Errorf("prepared query: %w", err)
	}
	rows, err := db.QueryContext(ctx, "SELECT id, v FROM t WHERE id IN (?, ?) ORDER BY id", id, id+1)
	if err != nil {
		return "", fmt.Errorf("multi-row query: %w", err)
	}
	var ids []string
	for rows.Next() {
		var rid int
		var rv string
		if err := rows.Scan(&rid, &rv); err != nil {
			rows.Close()
			return "", err
		}
		ids = append(ids, fmt.Sprintf("%d=%s", rid, rv))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", err
	}
	if err := db.PingContext(ctx); err != nil {
		return "", fmt.Errorf("ping: %w", err)
	}
	return fmt.Sprintf("%s|%d|%s|%s", v, n, c, strings.Join(ids, ",")), nil
}

func TestMySQL128ConcurrentTraces(t *testing.T) {
	ctx := context.Background()
	dbName, addr := scratchDB(t, traces+1)
	rec := mocktest.NewRecorder()
	real := mysqlDB(t, rec.Dialer("mysql", ""), dbName, 8)
	tag := randHex(4)
	run := func(db *sql.DB, got []string) {
		var wg sync.WaitGroup
		for i := range traces {
			wg.Go(func() {
				defer mocktest.Bind(fmt.Sprintf("mysql-%d-%s", i, tag))()
				s, err := mysqlWork(ctx, db, i)
				if err != nil {
					s = "error: " + err.Error()
				}
				got[i] = s
			})
		}
		wg.Wait()
	}
	want := make([]string, traces)
	run(real, want)
	for i, w := range want {
		if !strings.HasPrefix(w, fmt.Sprintf("row-%d-", i+1)) || !strings.Contains(w, fmt.Sprintf("|%d|", 1000+i)) {
			t.Fatalf("recording trace %d: %s", i, w)
		}
	}
	real.Close()
	sessions := rec.Sessions()
	if len(sessions) != traces {
		t.Fatalf("recorded %d sessions, want %d", len(sessions), traces)
	}
	srv := mocktest.NewServer(t, mockserver.Config{}, sessions...)
	d := &mocktest.Dialer{Mock: srv.Addr()}
	replay := mysqlDB(t, d.DialContext, dbName, 8)
	got := make([]string, traces)
	run(replay, got)
	for i := range traces {
		if got[i] != want[i] {
			t.Errorf("trace %d: replay got %q, recorded %q", i, got[i], want[i])
		}
	}
	for i := range traces {
		r := report(t, srv, fmt.Sprintf("mysql-%d-%s", i, tag))
		if m := missesOf(r); len(m) > 0 {
			t.Errorf("trace %d: missing mocks: %+v", i, m)
		}
	}
	_ = addr
}

// TestMySQLPreparedAgainIsSetup: a statement the trace prepares once more
// than its recording did (database/sql retrying on another connection) is
// answered from the destination's recordings and reported as set-up, so
// that its Matched, a call of another recording, is never taken for one of
// the trace's.
func TestMySQLPreparedAgainIsSetup(t *testing.T) {
	ctx := context.Background()
	dbName, _ := scratchDB(t, 1)
	rec := mocktest.NewRecorder()
	real := mysqlDB(t, rec.Dialer("mysql", ""), dbName, 1)
	tid := "again-" + randHex(4)
	const q = "SELECT n + ? FROM t WHERE id = 1"
	func() {
		defer mocktest.Bind(tid)()
		var n int64
		if err := real.QueryRowContext(ctx, q, 1).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}()
	real.Close()
	srv := mocktest.NewServer(t, mockserver.Config{}, rec.Sessions()...)
	d := &mocktest.Dialer{Mock: srv.Addr()}
	replay := mysqlDB(t, d.DialContext, dbName, 1)
	func() {
		defer mocktest.Bind(tid)()
		for range 2 { // the second prepare is one the recording does not have
			var n int64
			_ = replay.QueryRowContext(ctx, q, 1).Scan(&n)
		}
	}()
	var prepares []mockserver.ObservedCall
	for _, c := range report(t, srv, tid).Calls {
		if strings.Contains(string(c.Request), q) {
			prepares = append(prepares, c)
		}
	}
	if len(prepares) != 2 {
		t.Fatalf("observed prepares: %+v", prepares)
	}
	if p := prepares[0]; p.Setup || p.Matched < 0 {
		t.Errorf("first prepare: %+v; want matched in the trace's recording", p)
	}
	if p := prepares[1]; !p.Setup || p.Strategy != "setup" || p.Error != "" {
		t.Errorf("second prepare: %+v; want answered as set-up", p)
	}
}
