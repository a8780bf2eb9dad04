package e2e

import (
	"bufio"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/retrace-dev/retrace/examples/orders/orderstest"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/replayer/regress"
)

// catalog is one run of the examples/catalog binary.
type catalog struct {
	cmd  *exec.Cmd
	url  string
	done chan error
}

// startCatalog runs bin with env and waits for its listening line; an
// error says why it did not start, with its output.
func startCatalog(t *testing.T, bin, logPath string, env ...string) (*catalog, error) {
	t.Helper()
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0")
	cmd.Env = append(cleanEnv(), env...)
	pr, pw := io.Pipe()
	cmd.Stderr, cmd.Stdout = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &catalog{cmd: cmd, done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait(); pw.Close() }()
	log, _ := os.Create(logPath)
	found := make(chan string, 1)
	go func() {
		defer log.Close()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
			if addr, ok := strings.CutPrefix(sc.Text(), "catalog: listening on "); ok {
				found <- addr
			}
		}
	}()
	select {
	case addr := <-found:
		c.url = "http://" + addr
		t.Cleanup(func() { c.stop() })
		return c, nil
	case err := <-c.done:
		out, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("exited before listening: %v\n%s", err, out)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return nil, fmt.Errorf("not listening after 30s")
	}
}

func (c *catalog) stop() {
	if c.cmd.ProcessState != nil {
		return
	}
	c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

var catalogBin struct {
	once sync.Once
	path string
	err  error
}

func buildCatalog(t *testing.T) string {
	t.Helper()
	catalogBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "retrace-e2e-catalog-")
		if err != nil {
			catalogBin.err = err
			return
		}
		catalogBin.path = filepath.Join(dir, "catalog")
		cmd := exec.Command("go", "build", "-o", catalogBin.path, "./examples/catalog")
		cmd.Dir = moduleRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			catalogBin.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if catalogBin.err != nil {
		t.Fatal(catalogBin.err)
	}
	return catalogBin.path
}

// TestServiceBootsInReplayMode (issue 22): a service that pings MySQL
// through gorm, runs gorm's AutoMigrate and pings Redis before it serves
// is recorded, then started in replay mode with MySQL, Redis and the
// pricing service stopped: it boots on its start-up recording, and its
// sessions pass.
func TestServiceBootsInReplayMode(t *testing.T) {
	if testing.Short() {
		t.Skip("end to end: builds a binary and runs it twice")
	}
	bin := buildCatalog(t)
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			keepDir(t, dir, t.Name())
		}
	})
	// a database of its own on the test server, behind a proxy the test stops
	mc, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	root, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	dbName := fmt.Sprintf("retrace_catalog_%d", time.Now().UnixNano()%1e9)
	if _, err := root.Exec("CREATE DATABASE " + dbName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Exec("DROP DATABASE " + dbName); root.Close() })
	pricing := orderstest.Pricing(t, nil)
	pu, _ := url.Parse(pricing.URL)
	myProxy, redisProxy, pricingProxy := newProxy(t, mc.Addr), newProxy(t, testenv.RedisAddr(t)), newProxy(t, pu.Host)
	mc.Addr, mc.DBName = myProxy.Addr(), dbName
	mc.ParseTime = true
	env := []string{"CATALOG_MYSQL=" + mc.FormatDSN(), "CATALOG_REDIS=" + redisProxy.Addr(), "CATALOG_PRICING=http://" + pricingProxy.Addr()}

	recDir := filepath.Join(dir, "recordings")
	rec, err := startCatalog(t, bin, filepath.Join(dir, "record.log"), append(env, "RETRACE_MODE=record", "RETRACE_RECORD="+recDir)...)
	if err != nil {
		t.Fatal(err)
	}
	const items = 20
	skus := []string{"KB-101", "MS-202", "HD-303", "CB-404"}
	for i := range items {
		body := fmt.Sprintf(`{"sku":"%s-%d","name":"item %d"}`, skus[i%len(skus)], i, i)
		resp, err := http.Post(rec.url+"/items", "application/json", strings.NewReader(body))
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /items: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	for i := range 2 * items {
		resp, err := http.Get(fmt.Sprintf("%s/items/%d", rec.url, i%items+1))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	rec.stop()
	all := readSessions(recDir)
	var background int
	for _, s := range all {
		if s.Background {
			background += len(s.Calls)
		}
	}
	if inbound(all) != 3*items || background == 0 {
		t.Fatalf("recorded %d sessions with %d background calls; want %d and some", inbound(all), background, 3*items)
	}

	// Replay: every downstream stopped.
	myProxy.Stop()
	redisProxy.Stop()
	pricingProxy.Stop()
	// Without its start-up recording the service cannot boot: what it asks
	// before serving carries no trace.
	if svc, err := startCatalog(t, bin, filepath.Join(dir, "replay-no-background.log"),
		append(env, "RETRACE_MODE=replay", "RETRACE_MOCK_ADDR="+startMock(t, inboundOnly(all)).Addr())...); err == nil {
		svc.stop()
		t.Fatal("the service booted in replay mode with no background recording: the test proves nothing")
	}
	mock := startMock(t, all)
	svc, err := startCatalog(t, bin, filepath.Join(dir, "replay.log"), append(env, "RETRACE_MODE=replay", "RETRACE_MOCK_ADDR="+mock.Addr())...)
	if err != nil {
		t.Fatalf("the service did not boot in replay mode: %v", err)
	}
	cfg := regress.Config{Source: regress.Sessions(all), Target: svc.url, MockAdmin: mock.AdminURL(), Concurrency: 8}
	sum, results := replayAll(t, cfg, filepath.Join(dir, "report"))
	if sum.Sessions != 3*items || sum.Passed != sum.Sessions {
		for _, r := range firstN(results, func(r *regress.Result) bool { return r.Status != regress.Passed }, 5) {
			t.Errorf("session %s %s: %s %s %s", r.Session, r.API, r.Status, r.Error, labels(r.Findings))
		}
		t.Fatalf("replay: %d sessions, %d passed, %d failed, %d errors", sum.Sessions, sum.Passed, sum.Failed, sum.Errors)
	}
	for _, p := range []*tcpProxy{myProxy, redisProxy, pricingProxy} {
		if p.Accepted() == 0 {
			t.Errorf("proxy %s saw no connection while recording", p.Addr())
		}
	}
}
