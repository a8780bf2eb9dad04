package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/retrace-dev/retrace/examples/ledger"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording/capture"
	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/replayer/regress"
)

const ledgerRequests = 300

// ledgerBinary builds the ledger example (with the agent's blank import).
func ledgerBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ledger")
	cmd := exec.Command("go", "build", "-o", out, "./examples/ledger/cmd/ledger")
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// startLedger runs the ledger binary with env until the test ends and
// returns its base URL.
func startLedger(t *testing.T, bin, logPath string, args []string, env ...string) (url string, stop func()) {
	t.Helper()
	url, stop, err := runLedger(t, bin, logPath, args, env...)
	if err != nil {
		t.Fatal(err)
	}
	return url, stop
}

// runLedger is startLedger, with an error when the service does not
// listen.
func runLedger(t *testing.T, bin, logPath string, args []string, env ...string) (url string, stop func(), err error) {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, append([]string{"-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "RETRACE_MODE=", "RETRACE_LOG=error"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stdout = log
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(log, line)
			if a, ok := strings.CutPrefix(line, ledger.ListeningPrefix); ok {
				addr <- a
			}
		}
		close(addr)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
			log.Close()
		})
	}
	t.Cleanup(stop)
	select {
	case a, ok := <-addr:
		if !ok {
			cmd.Wait()
			b, _ := os.ReadFile(logPath)
			return "", stop, fmt.Errorf("ledger exited before listening:\n%s", b)
		}
		return "http://" + a, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", stop, fmt.Errorf("ledger did not listen within 30s")
	}
}

// ledgerTraffic sends requests from clients concurrent clients: transfers
// between random accounts (some refused for want of funds) and account
// reads.
func ledgerTraffic(t *testing.T, base string, requests, clients int) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int, requests)
	for i := range requests {
		next <- i
	}
	close(next)
	errs := make(chan error, requests)
	for range clients {
		wg.Go(func() {
			for i := range next {
				rng := rand.New(rand.NewPCG(uint64(i), 7))
				from, to := 1+rng.IntN(ledger.Accounts), 1+rng.IntN(ledger.Accounts)
				var resp *http.Response
				var err error
				if i%3 == 2 || from == to {
					resp, err = http.Get(fmt.Sprintf("%s/accounts/%d", base, from))
				} else {
					amount := fmt.Sprintf("%d.%02d", rng.IntN(400), rng.IntN(100))
					body := fmt.Sprintf(`{"from":%d,"to":%d,"amount":%q,"memo":"r%d"}`, from, to, amount, i)
					resp, err = http.Post(base+"/transfers", "application/json", strings.NewReader(body))
				}
				if err != nil {
					errs <- err
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode >= 500 {
					errs <- fmt.Errorf("request %d: %s: %s", i, resp.Status, body)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestLedgerOnPostgres is the demo's story on PostgreSQL: the ledger
// example records 300 requests from 16 clients against the real
// PostgreSQL through the agent, then replays them at concurrency 32 with
// PostgreSQL gone (its proxy stopped, no connection reaches it): every
// session passes. Its start-up (a ping, SELECT version(), the SET each
// new connection of the pool sends in AfterConnect, gorm's AutoMigrate)
// is answered from the background sessions: without them it cannot boot. A build that credits one cent less fails, and the
// report names the UPDATE's parameter.
func TestLedgerOnPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds a binary and sends hundreds of requests")
	}
	pgURL := testenv.PostgresURL(t)
	bin := ledgerBinary(t)
	at := strings.Index(pgURL, "@")
	rest := pgURL[at+1:]
	slash := strings.IndexAny(rest, "/?")
	proxy := newProxy(t, rest[:slash])
	schema := fmt.Sprintf("ledger_e2e_%d", time.Now().UnixNano())
	url := pgURL[:at+1] + proxy.Addr() + rest[slash:]
	if strings.Contains(url, "?") {
		url += "&search_path=" + schema
	} else {
		url += "?search_path=" + schema
	}
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), pgURL); err == nil {
			conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(context.Background())
		}
	})
	dir := t.TempDir()
	recDir := filepath.Join(dir, "recordings")

	base, stop := startLedger(t, bin, filepath.Join(dir, "record.log"), []string{"-init"},
		// RETRACE_RANDOM is the default, math: pgx's pool draws from
		// math/rand when a request's goroutine opens a connection, which
		// replay does in other requests, but those are a dependency's draws,
		// left real (not the service's randomness)
		"LEDGER_POSTGRES_URL="+url, "RETRACE_MODE=record", "RETRACE_RECORD="+recDir, "RETRACE_APP=ledger")
	ledgerTraffic(t, base, ledgerRequests, 16)
	// the recorder's writer flushes on its own, at least once a second
	waitSessions(t, recDir, ledgerRequests, 10*time.Second)
	stop()
	// the background sessions are written when the process ends
	sessions := readSessions(recDir)
	proxy.Stop()
	before := proxy.Accepted()
	// the start-up's queries are the background sessions': version(), the
	// SET of each new connection (AfterConnect), gorm's AutoMigrate
	var startup []string
	for _, s := range sessions {
		if s.Background {
			for _, c := range s.Calls {
				if c.Proto == "postgres" {
					startup = append(startup, capture.Decode(c.Proto, c.Request))
				}
			}
		}
	}
	for _, want := range []string{"version()", "statement_timeout", "information_schema", "CREATE TABLE"} {
		if !slices.ContainsFunc(startup, func(q string) bool { return strings.Contains(q, want) }) {
			t.Errorf("no start-up query with %q among the background calls: %q", want, startup)
		}
	}

	// Without its start-up recording the service cannot boot: what it
	// asks before serving carries no trace.
	if _, stop, err := runLedger(t, bin, filepath.Join(dir, "replay-no-background.log"), nil, "LEDGER_POSTGRES_URL="+url,
		"RETRACE_MODE=replay", "RETRACE_MOCK_ADDR="+startMock(t, inboundOnly(sessions)).Addr()); err == nil {
		stop()
		t.Fatal("the ledger booted in replay mode with no background recording: the test proves nothing")
	}
	mock := startMock(t, sessions)
	replay := func(name string, env ...string) (regress.Config, func()) {
		u, stop := startLedger(t, bin, filepath.Join(dir, name+".log"), nil,
			append([]string{"LEDGER_POSTGRES_URL=" + url, "RETRACE_MODE=replay", "RETRACE_MOCK_ADDR=" + mock.Addr()}, env...)...)
		return regress.Config{Source: regress.Sessions(sessions), MockAdmin: mock.AdminURL(), Concurrency: replayWorkers, Target: u}, stop
	}
	cfg, stopReplay := replay("replay")
	noise, err := regress.DetectNoise(context.Background(), cfg, regress.NoiseConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range noise.Rules {
		t.Logf("noise: %s %s %s ignore %s", r.API, r.Scope, r.Dst, r.Ignore)
	}
	if cfg.Rules, err = diff.NewRules(noise.Rules...); err != nil {
		t.Fatal(err)
	}
	sum, results := replayAll(t, cfg, filepath.Join(dir, "report"))
	stopReplay()
	if sum.Sessions != ledgerRequests || sum.Passed != ledgerRequests {
		for _, r := range firstN(results, func(r *regress.Result) bool { return r.Status != regress.Passed }, 5) {
			t.Errorf("session %s %s: %s %s %s", r.Session, r.API, r.Status, r.Error, labels(r.Findings))
		}
		t.Fatalf("replay: %d sessions, %d passed, %d failed, %d errors (want all %d passed)",
			sum.Sessions, sum.Passed, sum.Failed, sum.Errors, ledgerRequests)
	}
	if n := proxy.Accepted() - before; n != 0 {
		t.Fatalf("%d connections reached PostgreSQL during the replay", n)
	}

	changed, stopChanged := replay("changed", "LEDGER_VARIANT="+ledger.VariantChanged)
	changed.Rules = cfg.Rules
	sum, results = replayAll(t, changed, filepath.Join(dir, "report-changed"))
	stopChanged()
	caught := 0
	for _, r := range results {
		for _, f := range r.Findings {
			if f.Where == regress.InDownstream && f.Path == "params[1]" && strings.Contains(f.Difference.String(), "→") {
				caught++
				break
			}
		}
	}
	if sum.Failed == 0 || caught == 0 {
		t.Fatalf("changed build: %d failed, %d with the UPDATE's parameter changed; want the transfers to fail there", sum.Failed, caught)
	}
	t.Logf("changed build: %d of %d sessions failed, %d at the credited amount (params[1])", sum.Failed, sum.Sessions, caught)
}
