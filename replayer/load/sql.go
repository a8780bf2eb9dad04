package load

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
)

// SQLExecutor runs KindSQL requests through database/sql. Every statement
// goes through QueryContext and its rows are read to the end, so the
// latency covers the whole result set, as a client of the target would see
// it.
type SQLExecutor struct {
	db        *sql.DB
	timeout   time.Duration
	closeOnce sync.Once
	closeErr  error
}

var _ Executor = (*SQLExecutor)(nil)

// NewSQLExecutor opens a pool of cfg.Concurrency connections with the named
// database/sql driver ("mysql" is linked in) and DSN.
func NewSQLExecutor(driver, dsn string, cfg ExecutorConfig) (*SQLExecutor, error) {
	cfg = cfg.withDefaults()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("SQL target (%s): %w", driver, err)
	}
	db.SetMaxOpenConns(cfg.Concurrency)
	db.SetMaxIdleConns(cfg.Concurrency)
	return &SQLExecutor{db: db, timeout: cfg.Timeout}, nil
}

// DB is the pool, for callers that want to prepare the target.
func (e *SQLExecutor) DB() *sql.DB { return e.db }

// Execute implements Executor.
func (e *SQLExecutor) Execute(ctx context.Context, r *Request) Outcome {
	if k := r.EffectiveKind(); k != KindSQL {
		return Outcome{Err: fmt.Errorf("request of kind %q cannot run on a SQL target", k)}
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	rows, err := e.db.QueryContext(ctx, r.Query, r.Args...)
	if err != nil {
		return Outcome{Err: err}
	}
	for rows.Next() {
	}
	err = rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return Outcome{Err: err}
}

// Close implements Executor.
func (e *SQLExecutor) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.db.Close() })
	return e.closeErr
}
