package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
)

// mockTokenEnv names the environment variable that holds the mock admin
// API's token, read by both sides: retrace mock (--admin-token) and retrace
// replay (--mock-admin-token).
const mockTokenEnv = "RETRACE_MOCK_ADMIN_TOKEN"

func init() {
	commands["mock"] = command{summary: "answer the downstream calls of replayed requests from recordings", run: runMock}
}

// kvList is a repeatable flag of KEY[=VALUE] items, also comma-separated.
type kvList map[string]string

func (l kvList) String() string {
	var parts []string
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (l kvList) Set(s string) error {
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, v, _ := strings.Cut(item, "=")
		l[k] = v
	}
	return nil
}

// readMapFile adds the NEW=RECORDED lines of a mapping file to m; blank
// lines and lines starting with # are skipped.
func readMapFile(path string, m kvList) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		live, rec, ok := strings.Cut(line, "=")
		live, rec = strings.TrimSpace(live), strings.TrimSpace(rec)
		if !ok || live == "" || rec == "" {
			return fmt.Errorf("%s:%d: %q: want NEW=RECORDED", path, i+1, line)
		}
		m[live] = rec
	}
	return nil
}

// strategyList is the repeatable --strategy-for DST=CHAIN flag.
type strategyList map[string][]mockserver.Strategy

func (l strategyList) String() string { return fmt.Sprint(map[string][]mockserver.Strategy(l)) }

func (l strategyList) Set(s string) error {
	dst, chain, ok := strings.Cut(s, "=")
	if !ok || dst == "" {
		return fmt.Errorf("want DST=CHAIN such as 10.0.0.7:6379=redis,order, got %q", s)
	}
	c, err := mockserver.ParseStrategies(chain)
	if err != nil {
		return err
	}
	l[dst] = c
	return nil
}

func runMock(ctx context.Context, p *proc, args []string) error {
	fs := newFlagSet(p, "mock", "--recordings SRC [--listen ADDR] [--admin ADDR] [flags]",
		"retrace mock --recordings ./retrace-recordings --listen 127.0.0.1:3515 --admin 127.0.0.1:3516 --strategy order --strategy-for 10.0.0.7:3306=sql,order --passthrough 10.0.0.9:3306")
	src := fs.String("recordings", "", "recordings: a directory, file://DIR, redis://HOST:PORT/N or an object-storage URL (required)")
	listen := fs.String("listen", mockserver.DefaultListen, "address for the framed traffic of services under replay")
	admin := fs.String("admin", mockserver.DefaultAdmin, `address of the admin API ("-" for none)`)
	strategy := fs.String("strategy", "order", "matching chain for every destination: comma-separated of order, first, last, hamming, json, sql, redis")
	perDst := strategyList{}
	fs.Var(perDst, "strategy-for", "matching chain for one destination, DST=CHAIN (repeatable)")
	pass := kvList{}
	fs.Var(pass, "passthrough", "destination DST[=REAL] whose connections go to the real server (repeatable, comma-separated)")
	untraced := kvList{}
	fs.Var(untraced, "proxy-untraced", `destination DST[=REAL] ("*" for all) whose untraced HTTP/Redis requests go to the real server (repeatable)`)
	dstMap := kvList{}
	fs.Var(dstMap, "map", "replay in another environment: live destination NEW=RECORDED, each host:port or a host (repeatable, comma-separated)")
	mapFile := fs.String("map-file", "", "file of NEW=RECORDED destination mappings, one a line (# comments)")
	lazy := fs.Bool("lazy", false, "do not preload: fetch each recording from the store when a trace first names it")
	readTimeout := fs.Duration("read-timeout", 10*time.Second, "longest time a frame may take to arrive once it started")
	idleTimeout := fs.Duration("idle-timeout", mockserver.DefaultIdleTimeout, "close connections idle this long (0: never)")
	maxConns := fs.Int("max-conns", mockserver.DefaultMaxConns, "framed connections open at once; more are closed on accept (0: no bound)")
	traceTTL := fs.Duration("trace-ttl", mockserver.DefaultTraceTTL, "drop a trace's state and alias once unused this long (0: keep until deleted)")
	maxTraces := fs.Int("max-traces", mockserver.DefaultMaxTraces, "traces with state; beyond it the least recently used are dropped (0: no bound)")
	maxAliases := fs.Int("max-aliases", mockserver.DefaultMaxAliases, "aliases registered at once; more are refused with 503 (0: no bound)")
	adminToken := fs.String("admin-token", "", "token every admin request but GET /healthz must send as 'Authorization: Bearer TOKEN'; "+
		"required when --admin is not a loopback address (default: $"+mockTokenEnv+")")
	adminRead := fs.Duration("admin-read-timeout", mockserver.DefaultAdminReadTimeout, "longest an admin request may take to arrive, headers and body")
	adminWrite := fs.Duration("admin-write-timeout", mockserver.DefaultAdminWriteTimeout, "longest an admin answer may take to be written")
	logEvery := fs.Duration("log-window", mockserver.DefaultLogWindow, "repeated log lines: each message at most --log-burst times per window, then a count (0: log every line)")
	logBurst := fs.Int("log-burst", mockserver.DefaultLogBurst, "lines of one message logged per --log-window")
	maxFrame := fs.Int("max-frame", 16<<20, "largest frame payload in bytes")
	logLevel := fs.String("log", "info", "log level: error, info or debug")
	causal := fs.Duration("causal-wait", mockserver.DefaultCausalWait,
		"longest an answer is held until its trace has sent every call its recording sent before that answer (0: don't hold)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected argument %q", fs.Arg(0))
	}
	if *src == "" {
		return usageError("--recordings is required (a directory or a store URL)")
	}
	if *mapFile != "" {
		if err := readMapFile(*mapFile, dstMap); err != nil {
			return usageError("--map-file: %v", err)
		}
	}
	for live, rec := range dstMap {
		if live == "" || rec == "" {
			return usageError("--map %q=%q: want NEW=RECORDED", live, rec)
		}
	}
	chain, err := mockserver.ParseStrategies(*strategy)
	if err != nil {
		return usageError("--strategy: %v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError("--log %q: want error, info or debug", *logLevel)
	}
	log := slog.New(slog.NewTextHandler(p.Stderr, &slog.HandlerOptions{Level: level}))

	if dir, ok := localDir(*src); ok {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return usageError("--recordings %q: not a directory of recordings", *src)
		}
	}
	store, err := recording.Open(ctx, *src, recording.WithErrorHandler(func(err error) { log.Warn("skipped", "err", err) }))
	if err != nil {
		return fmt.Errorf("--recordings %q: %w", *src, err)
	}
	defer store.Close()
	cfg := mockserver.Config{Listen: *listen, Admin: *admin, Strategies: chain, DstStrategies: perDst,
		Passthrough: pass, Untraced: untraced, Map: dstMap, ReadTimeout: *readTimeout, IdleTimeout: *idleTimeout,
		MaxFrame: *maxFrame, Logger: log, CausalWait: *causal}
	cfg.MaxConns, cfg.TraceTTL, cfg.MaxTraces, cfg.MaxAliases = *maxConns, *traceTTL, *maxTraces, *maxAliases
	cfg.AdminToken, cfg.AdminReadTimeout, cfg.AdminWriteTimeout = *adminToken, *adminRead, *adminWrite
	if cfg.AdminToken == "" {
		cfg.AdminToken = p.Getenv(mockTokenEnv) // read here, not as the flag's default: --help must not print it
	}
	cfg.LogWindow, cfg.LogBurst = *logEvery, *logBurst
	// Config's zero means the default; a flag's zero means off (or no
	// bound), which Config spells negative.
	for _, d := range []*time.Duration{&cfg.CausalWait, &cfg.IdleTimeout, &cfg.TraceTTL, &cfg.LogWindow} {
		if *d <= 0 {
			*d = -1
		}
	}
	for _, n := range []*int{&cfg.MaxConns, &cfg.MaxTraces, &cfg.MaxAliases} {
		if *n <= 0 {
			*n = -1
		}
	}
	switch {
	case *adminRead <= 0 || *adminWrite <= 0:
		return usageError("--admin-read-timeout and --admin-write-timeout must be > 0")
	case *logBurst <= 0:
		return usageError("--log-burst %d: want at least 1", *logBurst)
	case *maxFrame <= 0:
		return usageError("--max-frame %d: want at least 1", *maxFrame)
	}
	if *lazy {
		cfg.Lookup = func(ctx context.Context, id string) (*recording.Session, error) {
			s, err := store.Get(ctx, id)
			if errors.Is(err, recording.ErrNotFound) {
				return nil, nil
			}
			return s, err
		}
	}
	srv, err := mockserver.New(cfg)
	if err != nil {
		return usageError("%v", err)
	}
	if !*lazy {
		start := time.Now()
		n, err := srv.Load(ctx, func(ctx context.Context, yield func(*recording.Session) error) error {
			seen := 0
			return store.Scan(ctx, func(s *recording.Session) error {
				if seen++; seen%50000 == 0 {
					fmt.Fprintf(p.Stderr, "retrace mock: loading: %d sessions so far (%s)\n", seen, time.Since(start).Round(time.Millisecond))
				}
				return yield(s)
			})
		})
		if err != nil {
			return fmt.Errorf("loading %s: %w", *src, err)
		}
		fmt.Fprintf(p.Stderr, "retrace mock: loaded %d sessions from %s in %s\n", n, *src, time.Since(start).Round(time.Millisecond))
		if n == 0 {
			fmt.Fprintf(p.Stderr, "retrace mock: warning: %s holds no sessions; every traced request will be a missing mock\n", *src)
		}
	}
	if err := srv.Start(); err != nil {
		return err
	}
	fmt.Fprintf(p.Stderr, "retrace mock: listening on %s, admin API %s (Ctrl-C to stop)\n", srv.Addr(), srv.AdminURL())
	<-ctx.Done()
	fmt.Fprintln(p.Stderr, "retrace mock: stopping")
	return srv.Close()
}

// existingSource returns a usage error when src names a local path that
// does not exist (a directory store would be created empty, and read as a
// source with no session).
func existingSource(src string) error {
	if dir, ok := localDir(src); ok {
		if _, err := os.Stat(dir); err != nil {
			return usageError("recordings %q: %v", src, err)
		}
	}
	return nil
}

// localDir returns the directory a --recordings value names, if it names one.
func localDir(src string) (string, bool) {
	if rest, ok := strings.CutPrefix(src, "file://"); ok {
		return rest, true
	}
	return src, !strings.Contains(src, "://")
}

var _ flag.Value = kvList{}
var _ flag.Value = strategyList{}
