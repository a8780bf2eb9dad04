package mockserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// Default addresses: both loopback, so a mock server is never reachable from
// another machine unless told otherwise.
const (
	DefaultListen = "127.0.0.1:3515"
	DefaultAdmin  = "127.0.0.1:3516"
)

// DefaultCausalWait is Config.CausalWait's default: long enough for a busy
// system under test to send a sibling goroutine's call, short enough that a
// build which no longer sends it is slowed once by a little.
const DefaultCausalWait = 250 * time.Millisecond

// Defaults of the bounds of a Config's zero value: what one mock server
// keeps at most, whoever reaches it.
const (
	// DefaultTraceTTL drops a trace's state once no request or report
	// touched it for this long: far longer than a replay of one session
	// and the fetch of its report.
	DefaultTraceTTL = 10 * time.Minute
	// DefaultMaxTraces bounds the traces with state (a few KB each, more
	// for long traces): beyond it the least recently used are dropped.
	DefaultMaxTraces = 20000
	// DefaultMaxAliases bounds the registered aliases (POST /traces).
	DefaultMaxAliases = 100000
	// DefaultMaxConns bounds the framed connections open at once.
	DefaultMaxConns = 4096
	// DefaultIdleTimeout closes a framed connection idle this long.
	DefaultIdleTimeout = 15 * time.Minute
	// DefaultAdminReadTimeout bounds the reading of one admin request,
	// headers and body.
	DefaultAdminReadTimeout = 10 * time.Second
	// DefaultAdminWriteTimeout bounds the writing of one admin answer; it
	// leaves room for a 30-second CPU profile.
	DefaultAdminWriteTimeout = 60 * time.Second
	// DefaultLogWindow and DefaultLogBurst limit repeated log lines: each
	// distinct message is logged DefaultLogBurst times per window, then
	// counted.
	DefaultLogWindow = 10 * time.Second
	DefaultLogBurst  = 10
)

// ErrAdminToken is returned by New when the admin API would listen beyond
// loopback without Config.AdminToken: anyone who reaches it could then
// register aliases, read every request of a replay and profile the
// process.
var ErrAdminToken = errors.New("mockserver: an admin address beyond loopback needs an admin token")

// Strategy names one way of choosing the recorded call that answers a live
// request among the recorded calls of its trace and destination with the
// same operation (HTTP method and path, Redis command, normalised SQL).
type Strategy string

// The matching strategies. A chain of them is tried in turn; the first that
// finds a call answers.
const (
	// StrategyOrder takes the calls in recorded order, each once.
	StrategyOrder Strategy = "order"
	// StrategyFirst always answers with the first recorded call (reusable).
	StrategyFirst Strategy = "first"
	// StrategyLast always answers with the last recorded call (reusable).
	StrategyLast Strategy = "last"
	// StrategyHamming takes the unused call whose request is nearest by
	// Hamming distance over the shorter length.
	StrategyHamming Strategy = "hamming"
	// StrategyJSON takes the unused call whose JSON body has the largest
	// share of fields equal to the live one's (HTTP: the decoded body;
	// Redis: the last argument, such as the value of a SET; fields are
	// compared by JSON path). Requests whose body is no JSON object or array
	// fall through to the next strategy.
	StrategyJSON Strategy = "json"
	// StrategySQL takes, among unused calls with the same normalised SQL,
	// the one with the most equal literals / statement parameters.
	StrategySQL Strategy = "sql"
	// StrategyRedis takes, among unused calls with the same command and
	// key, the one with the most equal arguments.
	StrategyRedis Strategy = "redis"
)

var strategies = []Strategy{StrategyOrder, StrategyFirst, StrategyLast, StrategyHamming, StrategyJSON, StrategySQL, StrategyRedis}

// ParseStrategies parses a comma-separated chain such as "redis,order".
func ParseStrategies(s string) ([]Strategy, error) {
	var out []Strategy
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		ok := false
		for _, st := range strategies {
			if f == string(st) {
				out = append(out, st)
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("unknown matching strategy %q in %q (want a comma-separated list of %v)", f, s, strategies)
		}
	}
	return out, nil
}

// Source streams recorded sessions into yield, stopping at the first error
// yield returns. A recording store's Scan has this shape.
type Source func(ctx context.Context, yield func(*recording.Session) error) error

// SessionsSource returns a Source over sessions held in memory.
func SessionsSource(sessions ...*recording.Session) Source {
	return func(ctx context.Context, yield func(*recording.Session) error) error {
		for _, s := range sessions {
			if err := yield(s); err != nil {
				return err
			}
		}
		return nil
	}
}

// Config configures a Server. Every field's zero value is usable.
type Config struct {
	// Listen is the address of the framed-traffic listener. "" means
	// DefaultListen (loopback).
	Listen string
	// Admin is the address of the admin API. "" means DefaultAdmin
	// (loopback); "-" disables the admin listener (Handler still serves it).
	Admin string

	// ReadTimeout bounds the time between the first byte of a frame and its
	// last: a sender slower than that loses its connection. 0 means 10s.
	ReadTimeout time.Duration
	// IdleTimeout closes a connection on which no frame starts for this
	// long (a pooled client dials again). 0 means DefaultIdleTimeout;
	// negative means never.
	IdleTimeout time.Duration
	// WriteTimeout bounds one write of an answer. 0 means 10s.
	WriteTimeout time.Duration
	// MaxFrame is the largest frame payload accepted; a longer frame closes
	// its connection. 0 means 16 MiB.
	MaxFrame int
	// MaxMessage is the largest protocol message (an HTTP request with its
	// body, a Redis command, a MySQL command) assembled from frames. 0 means
	// 64 MiB.
	MaxMessage int

	// Strategies is the matching chain for destinations without their own.
	// Empty means [StrategyOrder].
	Strategies []Strategy
	// DstStrategies gives destinations ("host:port") their own chain.
	DstStrategies map[string][]Strategy

	// Passthrough lists destinations whose connections are proxied whole to
	// a real server: the value is its address, "" meaning the destination
	// itself.
	Passthrough map[string]string
	// Map sends live destinations to recorded ones: "host:port" →
	// "host:port", or "host" → "host" (or "host:port"), the port kept. A
	// live destination the recordings name is answered as itself; one
	// neither they nor Map name goes to the recorded destination of its
	// protocol whose calls fit best (GET /destinations lists each choice).
	Map map[string]string
	// Untraced lists destinations whose requests without a trace id are
	// proxied to a real server (HTTP and Redis only): the value is its
	// address, "" meaning the destination itself; the key "*" stands for
	// every destination. Untraced requests to other destinations are
	// refused with a protocol error.
	Untraced map[string]string

	// Lookup, when set, fetches a recording that was not loaded, by id (a
	// store's Get). A nil session with a nil error means "no such
	// recording".
	Lookup func(ctx context.Context, id string) (*recording.Session, error)

	// CausalWait bounds how long an answer is held back until its trace has
	// sent every call that its recording shows sent before that answer came
	// back (calls expecting an answer; set-up traffic and COM_STMT_CLOSE
	// aside). This replays the recorded order between a request's
	// concurrent goroutines, e.g. a query sent just before a sibling's
	// failure cancelled it. A call the replay never sends is waited for
	// once per trace. 0 means DefaultCausalWait; negative disables holding.
	CausalWait time.Duration

	// MaxObserved bounds the calls kept per trace for its report. 0 means
	// 100000.
	MaxObserved int
	// MaxMissing bounds the missing mocks kept for /missing. 0 means 10000.
	MaxMissing int

	// TraceTTL drops the state of a trace (its observed calls, what it
	// used of its recording) and its alias once nothing touched them for
	// this long. 0 means DefaultTraceTTL; negative keeps them until
	// DELETE /traces/{trace} or MaxTraces.
	TraceTTL time.Duration
	// MaxTraces bounds the traces with state: a new one beyond it drops
	// the least recently used. 0 means DefaultMaxTraces; negative means
	// no bound. A trace id that names no recording and no alias never
	// gets state, whatever the bound: it costs a counter.
	MaxTraces int
	// MaxAliases bounds the aliases registered through POST /traces;
	// beyond it a registration is refused (503) until some expire or are
	// deleted. 0 means DefaultMaxAliases; negative means no bound.
	MaxAliases int
	// MaxConns bounds the framed connections open at once; one beyond it
	// is closed as soon as accepted. 0 means DefaultMaxConns; negative
	// means no bound.
	MaxConns int

	// AdminToken, when set, must be sent by every admin request but GET
	// /healthz, as "Authorization: Bearer TOKEN" (401 otherwise); it also
	// guards /debug/pprof/. "" means none, allowed only when Admin is a
	// loopback address (New returns ErrAdminToken otherwise).
	AdminToken string
	// AdminReadTimeout bounds reading one admin request, headers and body;
	// AdminWriteTimeout writing its answer. 0 means
	// DefaultAdminReadTimeout and DefaultAdminWriteTimeout.
	AdminReadTimeout, AdminWriteTimeout time.Duration

	// LogWindow and LogBurst limit repeated log lines (missing mocks,
	// refused connections, …): each distinct message is logged LogBurst
	// times per LogWindow, and then how many were held back. 0 means
	// DefaultLogWindow and DefaultLogBurst; a negative LogWindow logs
	// every line.
	LogWindow time.Duration
	LogBurst  int

	// Logger receives connection errors, missing mocks and lifecycle
	// events. nil discards them.
	Logger *slog.Logger
}

// withDefaults returns c with zero values replaced by their defaults, or an
// error naming the first invalid field.
// orDefault sets *v to def when it is the zero value.
func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func (c Config) withDefaults() (Config, error) {
	orDefault(&c.Listen, DefaultListen)
	orDefault(&c.Admin, DefaultAdmin)
	orDefault(&c.ReadTimeout, 10*time.Second)
	orDefault(&c.WriteTimeout, 10*time.Second)
	orDefault(&c.MaxFrame, 16<<20)
	orDefault(&c.MaxMessage, 64<<20)
	if len(c.Strategies) == 0 {
		c.Strategies = []Strategy{StrategyOrder}
	}
	orDefault(&c.CausalWait, DefaultCausalWait)
	orDefault(&c.MaxObserved, 100000)
	orDefault(&c.MaxMissing, 10000)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	orDefault(&c.IdleTimeout, DefaultIdleTimeout)
	orDefault(&c.TraceTTL, DefaultTraceTTL)
	orDefault(&c.MaxTraces, DefaultMaxTraces)
	orDefault(&c.MaxAliases, DefaultMaxAliases)
	orDefault(&c.MaxConns, DefaultMaxConns)
	orDefault(&c.AdminReadTimeout, DefaultAdminReadTimeout)
	orDefault(&c.AdminWriteTimeout, DefaultAdminWriteTimeout)
	orDefault(&c.LogWindow, DefaultLogWindow)
	orDefault(&c.LogBurst, DefaultLogBurst)
	switch {
	case c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.AdminReadTimeout < 0 || c.AdminWriteTimeout < 0:
		return c, errors.New("mockserver: read and write timeouts must not be negative")
	case c.MaxFrame < 0 || c.MaxMessage < 0 || c.MaxObserved < 0 || c.MaxMissing < 0 || c.LogBurst < 0:
		return c, errors.New("mockserver: limits must not be negative")
	}
	if c.Admin != "-" && c.AdminToken == "" && !loopback(c.Admin) {
		return c, fmt.Errorf("%w (admin address %q; set AdminToken, --admin-token or RETRACE_MOCK_ADMIN_TOKEN)", ErrAdminToken, c.Admin)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return c, fmt.Errorf("mockserver: listen address %q: %w", c.Listen, err)
	}
	if c.Admin != "-" {
		if _, _, err := net.SplitHostPort(c.Admin); err != nil {
			return c, fmt.Errorf("mockserver: admin address %q: %w", c.Admin, err)
		}
	}
	for dst, chain := range c.DstStrategies {
		if !trace.ValidDst(dst) {
			return c, fmt.Errorf("mockserver: strategy destination %q is not host:port", dst)
		}
		if len(chain) == 0 {
			return c, fmt.Errorf("mockserver: empty strategy chain for destination %q", dst)
		}
	}
	for live, rec := range c.Map {
		if live == "" || rec == "" || strings.ContainsAny(live+rec, " /,=") {
			return c, fmt.Errorf("mockserver: destination mapping %q=%q: want NEW=RECORDED, each host:port or a host", live, rec)
		}
	}
	for _, m := range []map[string]string{c.Passthrough, c.Untraced} {
		for dst, real := range m {
			if dst != "*" && !trace.ValidDst(dst) {
				return c, fmt.Errorf("mockserver: pass-through destination %q is not host:port", dst)
			}
			if real != "" {
				if _, _, err := net.SplitHostPort(real); err != nil {
					return c, fmt.Errorf("mockserver: real address %q for %q: %w", real, dst, err)
				}
			}
		}
	}
	return c, nil
}

// loopback reports whether the host of addr is a loopback address or
// "localhost" (an empty host, or 0.0.0.0, listens on every interface).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Config) chain(dst string) []Strategy {
	if s, ok := c.DstStrategies[dst]; ok {
		return s
	}
	return c.Strategies
}

// passthrough returns the real address of a pass-through destination.
func (c *Config) passthrough(dst string) (string, bool) {
	real, ok := c.Passthrough[dst]
	if real == "" {
		real = dst
	}
	return real, ok
}

// untraced returns where untraced requests to dst go.
func (c *Config) untraced(dst string) (string, bool) {
	real, ok := c.Untraced[dst]
	if !ok {
		real, ok = c.Untraced["*"]
	}
	if real == "" {
		real = dst
	}
	return real, ok
}
