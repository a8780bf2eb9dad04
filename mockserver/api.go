package mockserver

import (
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// The admin API (HTTP, JSON) of the mock server. These types are its wire
// contract with the replayer; fields are only ever added.
//
//	GET    /healthz                   {"ok":true,"sessions":N,"traces":N}
//	GET    /metrics                   Prometheus text format
//	POST   /traces                    body Alias: replay recording R under trace id T
//	DELETE /traces/{trace}            forget what was observed for a trace (and its alias)
//	GET    /traces/{trace}            TraceReport
//	GET    /missing                   []MissingMock, every request no recording answered
//	GET    /debug/pprof/…             the Go profiler (admin listener only)
//
// A trace id equal to a recording's id selects that recording without an
// alias. With Config.AdminToken set, every request but GET /healthz sends
// "Authorization: Bearer TOKEN" (401 otherwise). POST /traces answers 503
// once Config.MaxAliases aliases are registered. Traces and aliases not
// used for Config.TraceTTL are dropped as if deleted.

// Alias registers Trace as another name of the recording Recording, so one
// recording can be replayed several times at once.
type Alias struct {
	Trace     string `json:"trace"`
	Recording string `json:"recording"`
}

// TraceReport is everything the mock server saw of one trace.
type TraceReport struct {
	Trace     string         `json:"trace"`
	Recording string         `json:"recording"` // "" when the trace resolved to no recording
	Calls     []ObservedCall `json:"calls"`     // in the order they were received
	// Unused lists the recorded (non set-up) calls of the recording that no
	// live request matched: calls the new build no longer makes.
	Unused []recording.Call `json:"unused"`
	// Dropped counts calls received beyond Config.MaxObserved, not listed.
	Dropped int `json:"dropped,omitempty"`
	// Random lists where the replayed request's randomness left its
	// recording (RETRACE_RANDOM), as the agent reported it
	// (trace.RandomDst): one entry per source at most.
	Random []trace.Divergence `json:"random,omitempty"`
}

// ObservedCall is one request the system under test made, and how it was
// answered.
type ObservedCall struct {
	Seq   int    `json:"seq"` // order of arrival within the trace, from 0
	Proto string `json:"proto"`
	Dst   string `json:"dst"`
	// Setup marks a request answered as connection set-up, from any
	// recording of the destination: set-up traffic, or a request the
	// trace's recording has no more of that another recording answers (a
	// MySQL statement prepared once more after a retry). Matched is then
	// the Seq of a call of that other recording.
	Setup   bool   `json:"setup,omitempty"`
	Request []byte `json:"request"` // base64 in JSON, exact bytes
	// Matched is the Seq of the recorded call that answered, or -1 for a
	// missing mock.
	Matched  int     `json:"matched"`
	Strategy string  `json:"strategy,omitempty"` // "order", "first", "last", "hamming", "json", "sql", "redis", "setup"
	Score    float64 `json:"score,omitempty"`    // similarity in [0,1]; 1 for exact or order matches
	Error    string  `json:"error,omitempty"`    // why no recording answered
	// Synthesized marks a set-up request no recording answered, which the
	// mock server answered itself (Matched is then 0).
	Synthesized bool `json:"synthesized,omitempty"`
	// Proxied marks a request sent to the real destination.
	Proxied bool `json:"proxied,omitempty"`
	// Live is the destination the service dialled, when another recorded
	// destination (Dst) answered it: the replay environment is configured
	// with other addresses (GET /destinations says why that one).
	Live string `json:"live,omitempty"`
	// Statement is, for a MySQL command on a prepared statement (execute,
	// close, …), the SQL the statement was prepared with on that
	// connection; the statement id in Request is the mock server's own.
	Statement string `json:"statement,omitempty"`
}

// MissingMock is a request no recorded call answered: what a user reads to
// decide what to record or pass through.
type MissingMock struct {
	Trace   string `json:"trace"`
	Proto   string `json:"proto"`
	Dst     string `json:"dst"`
	Request []byte `json:"request"`
	Reason  string `json:"reason"`
}
