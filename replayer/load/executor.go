package load

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Executor runs one request against a target. Implementations are safe for
// concurrent use; Execute is called from many goroutines at once.
type Executor interface {
	// Execute sends r and waits for the complete answer. A non-nil Err in
	// the outcome counts the request as failed.
	Execute(ctx context.Context, r *Request) Outcome
	// Close releases connections. It is safe to call twice.
	Close() error
}

// Outcome is what executing one request gave.
type Outcome struct {
	Status int   // HTTP status code; 0 when there is none
	Err    error // transport error, failing status, SQL error
}

// ExecutorConfig tunes the executors built by NewExecutor.
type ExecutorConfig struct {
	// Concurrency is the number of requests expected in flight: the size of
	// the connection pools. Zero means 64.
	Concurrency int
	// Timeout bounds each request. Zero means 30s.
	Timeout time.Duration
	// FailStatus is the lowest HTTP status counted as an error. Zero means
	// 500 (5xx fail, 4xx do not: production traffic has its own 404s).
	FailStatus int
	// Traces sends each HTTP request with Retrace-Trace-Id: a fresh
	// derived alias (trace.Alias) of the recording it came from (its ID),
	// so a service in replay mode answers the calls it sends to the mock
	// server from that request's own recording, however often it is sent.
	// A request whose ID is no recording id then fails. The zero value
	// sends no trace ids.
	Traces bool
	// ReplayTime also sends Retrace-Replay-Time, the request's recorded
	// time (At), so that the service's clock reads as when it was
	// recorded (time mocking). Only with Traces; the zero value leaves the
	// service's clock alone.
	ReplayTime bool
}

func (c ExecutorConfig) withDefaults() ExecutorConfig {
	if c.Concurrency <= 0 {
		c.Concurrency = 64
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	if c.FailStatus <= 0 {
		c.FailStatus = 500
	}
	return c
}

// NewExecutor returns the executor for target: http:// and https:// URLs
// get an HTTP executor (request URIs are resolved against the URL),
// mysql://DSN a SQL executor over go-sql-driver/mysql (DSN in the driver's
// syntax, e.g. mysql://user:pw@tcp(127.0.0.1:3306)/db).
func NewExecutor(target string, cfg ExecutorConfig) (Executor, error) {
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok {
		return nil, fmt.Errorf("target %q has no scheme (want http://HOST:PORT or mysql://DSN)", target)
	}
	switch strings.ToLower(scheme) {
	case "http", "https":
		return NewHTTPExecutor(target, cfg)
	case "mysql":
		return NewSQLExecutor("mysql", rest, cfg)
	}
	return nil, fmt.Errorf("target %q: unsupported scheme %q (want http, https or mysql)", target, scheme)
}
