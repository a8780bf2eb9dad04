package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/retrace-dev/retrace/internal/grpctest"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/replayer/load"
	"github.com/retrace-dev/retrace/replayer/replaytest"
)

// runCmd runs one command line and returns its exit status and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	p := &proc{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	code := run(context.Background(), p, args)
	return code, out.String(), errOut.String()
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("retrace %s: exit %d\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// loadDB creates a database of the test's own with an accounts table.
func loadDB(t *testing.T) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("retrace_cmdload_%d", time.Now().UnixNano()%1e9)
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE " + name) })
	cfg.DBName = name
	cfg.MultiStatements = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE accounts (id INT PRIMARY KEY, level VARCHAR(8)); INSERT INTO accounts VALUES (1,'gold'),(2,'silver'),(3,'gold')"); err != nil {
		t.Fatal(err)
	}
	cfg.MultiStatements = false
	return cfg.FormatDSN()
}

// TestLoadPipelineV1AgainstV2 is the seed's migration: the same production
// log, executed once through the V1 HTTP API and once as SQL on V2, in two
// shards each, results in file:// object storage, compared per API.
func TestLoadPipelineV1AgainstV2(t *testing.T) {
	dsn := loadDB(t)
	v1 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		fmt.Fprintf(w, `{"account":%q}`, r.URL.Query().Get("id"))
	}))
	defer v1.Close()

	dir := t.TempDir()
	base := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
	var log strings.Builder
	for i := range 60 {
		api := "GetAccountLevel"
		if i%3 == 0 {
			api = "GetAccountList"
		}
		fmt.Fprintf(&log, `{"ts":%d,"req":{"method":"GET","path":"/v1/query?api=%s&id=%d"},"api":%q}`+"\n",
			base.Add(time.Duration(i)*20*time.Millisecond).UnixMilli(), api, i%3+1, api)
	}
	log.WriteString("{truncated\n")
	logFile := filepath.Join(dir, "prod.log")
	if err := os.WriteFile(logFile, []byte(log.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(dir, "v2.tmpl")
	if err := os.WriteFile(tmpl, []byte(`{{if eq (.Param "api") "GetAccountList"}}SELECT id FROM accounts{{else}}SELECT level FROM accounts WHERE id = {{.Param "id" | sqlnum}}{{end}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	store := "file://" + filepath.ToSlash(dir) + "/bucket"

	_, _, errOut := runCmd(t, "extract", "--from", logFile, "--format", "jsonl", "--time-field", "ts", "--method-field", "req.method",
		"--url-field", "req.path", "--api-field", "api", "--out", store+"/requests.jsonl")
	if !strings.Contains(errOut, "60 requests read, 60 written") || !strings.Contains(errOut, "prod.log:61") {
		t.Fatalf("extract said: %s", errOut)
	}
	mustRun(t, "prepare", "--in", store+"/requests.jsonl", "--out", store+"/v1.jsonl")
	mustRun(t, "prepare", "--in", store+"/requests.jsonl", "--template", tmpl, "--out", store+"/v2.jsonl")
	for i := range 2 {
		shard := fmt.Sprintf("%d/2", i)
		mustRun(t, "load", "--input", store+"/v1.jsonl", "--target", v1.URL, "--speed", "4", "--shard", shard, "--out", store+"/v1", "--progress", "off")
		mustRun(t, "load", "--input", store+"/v2.jsonl", "--target", "mysql://"+dsn, "--speed", "4", "--shard", shard, "--out", store+"/v2", "--progress", "off")
	}
	out := mustRun(t, "analyze", store+"/v1", "--compare", store+"/v2", "--format", "json", "--max-error-rate", "1%")
	var rep struct {
		Total      struct{ Count, Errors int64 }
		APIs       []struct{ API string }
		Candidate  struct{ Total struct{ Count, Errors int64 } }
		Comparison struct{ APIs []struct{ API string } }
		Violations []any
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Total.Count != 60 || rep.Total.Errors != 0 || rep.Candidate.Total.Count != 60 || rep.Candidate.Total.Errors != 0 {
		t.Errorf("v1 %+v, v2 %+v; want 60 requests without errors each\n%s", rep.Total, rep.Candidate.Total, out)
	}
	if len(rep.Comparison.APIs) != 2 || len(rep.APIs) != 2 {
		t.Errorf("compared APIs %+v, want GetAccountLevel and GetAccountList in both", rep.Comparison.APIs)
	}

	// A crossed threshold exits 1 and says which.
	code, _, errOut := runCmd(t, "analyze", store+"/v1", "--compare", store+"/v2", "--max-p99", "1us")
	if code != 1 || !strings.Contains(errOut, "p99") {
		t.Errorf("analyze with an impossible p99: exit %d, %s", code, errOut)
	}
	code, html, _ := runCmd(t, "analyze", store+"/v2", "--format", "html")
	if code != 0 || !strings.Contains(html, "<svg") || !strings.Contains(html, "GetAccountList") {
		t.Errorf("html report: exit %d", code)
	}
}

func TestLoadUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no target":      {"load", "--input", "x.jsonl", "--out", "o"},
		"bad mode":       {"load", "--input", "x", "--target", "http://127.0.0.1:1", "--out", "o", "--mode", "fast"},
		"bad shard":      {"load", "--input", "x", "--target", "http://127.0.0.1:1", "--out", "o", "--shard", "2/2"},
		"rate no rate":   {"load", "--input", "x", "--target", "http://127.0.0.1:1", "--out", "o", "--mode", "rate"},
		"ramp no dur":    {"load", "--input", "x", "--target", "http://127.0.0.1:1", "--out", "o", "--mode", "rate", "--ramp", "1:5"},
		"bad target":     {"load", "--input", "x", "--target", "ftp://h", "--out", "o"},
		"time no ids":    {"load", "--input", "x", "--target", "http://127.0.0.1:1", "--out", "o", "--replay-time"},
		"analyze nodir":  {"analyze"},
		"compare nodir":  {"analyze", "a", "--compare"},
		"bad threshold":  {"analyze", "a", "--max-p99-increase", "lots"},
		"bad format":     {"analyze", "a", "--format", "pdf"},
		"extract nofrom": {"extract"},
		"bad template":   {"prepare", "--template", "/nonexistent.tmpl"},
	} {
		t.Run(name, func(t *testing.T) {
			if code, _, errOut := runCmd(t, args...); code != 2 || errOut == "" {
				t.Errorf("exit %d, stderr %q; want 2 and a message", code, errOut)
			}
		})
	}
}

func TestExtractFromRecordingStore(t *testing.T) {
	dir := t.TempDir()
	st, err := recording.NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 29, 10, 15, 23, 0, time.UTC)
	var ss []*recording.Session
	for i := range 5 {
		ss = append(ss, &recording.Session{ID: fmt.Sprintf("t%d", i), At: at.Add(time.Duration(5-i) * time.Second),
			Inbound: recording.Inbound{Proto: "http", Request: []byte(fmt.Sprintf("GET /orders/%d HTTP/1.1\r\nHost: shop\r\n\r\n", i))}})
	}
	if err := st.Write(context.Background(), ss); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "req.jsonl")
	_, _, errOut := runCmd(t, "extract", "--from", dir, "--since", at.Add(2*time.Second).Format(time.RFC3339), "--out", out)
	if !strings.Contains(errOut, "5 requests read, 4 written, 1 outside the window") || !strings.Contains(errOut, "not in time order") {
		t.Fatalf("extract said: %s", errOut)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], `"id":"t3"`) || !strings.Contains(lines[3], `"url":"/orders/0"`) {
		t.Errorf("extracted:\n%s", b)
	}
}

func TestProgressPrinter(t *testing.T) {
	pg := load.Progress{Elapsed: 2500 * time.Millisecond, Sent: 120, Done: 118, Errors: 2, Rate: 47.5, P99: 12340 * time.Microsecond}
	var live, logged bytes.Buffer
	newProgressPrinter(&live, "live").print(pg)
	newProgressPrinter(&logged, "auto").print(pg) // not a terminal: log lines
	if s := live.String(); !strings.HasPrefix(s, "\r\033[K") || strings.Contains(s, "\n") ||
		!strings.Contains(s, "sent 120") || !strings.Contains(s, "errors 2 (1.69%)") || !strings.Contains(s, "rate 47.5/s") || !strings.Contains(s, "p99 12.34ms") {
		t.Errorf("live line %q", s)
	}
	if s := logged.String(); !strings.HasPrefix(s, "load: ") || !strings.HasSuffix(s, "\n") {
		t.Errorf("log line %q", s)
	}
	if newProgressPrinter(&live, "off") != nil {
		t.Error("--progress off prints")
	}
}

// TestLoadGRPC: recorded gRPC sessions of a real grpc-go server are
// extracted and sent to a grpc-go target at a fixed rate, at max and at
// the original pace; analyze shows each method with its own percentiles
// and the gRPC status codes the answers carried (the status call's
// NOT_FOUND is an answer, not an error).
func TestLoadGRPC(t *testing.T) {
	dir := t.TempDir()
	replaytest.WriteStore(t, dir, replaytest.RecordGRPC(t, 8)...)
	input := filepath.Join(t.TempDir(), "grpc.jsonl")
	mustRun(t, "extract", "--from", dir, "--out", input)
	target := replaytest.ServeGRPC(t, &grpctest.Service{})
	for _, mode := range [][]string{
		{"--mode", "rate", "--rate", "400", "--duration", "1s"},
		{"--mode", "max", "--concurrency", "16"},
		{"--mode", "original", "--speed", "100"},
	} {
		t.Run(mode[1], func(t *testing.T) {
			out := t.TempDir()
			mustRun(t, append([]string{"load", "--input", input, "--target", target, "--out", out, "--progress", "off"}, mode...)...)
			var sum struct {
				Total struct {
					Count, Errors int64
				} `json:"total"`
				APIs []struct {
					API    string           `json:"api"`
					Count  int64            `json:"count"`
					Errors int64            `json:"errors"`
					P50    float64          `json:"p50_ms"`
					P99    float64          `json:"p99_ms"`
					Status map[string]int64 `json:"status"`
				} `json:"apis"`
			}
			if err := json.Unmarshal([]byte(mustRun(t, "analyze", out, "--format", "json")), &sum); err != nil {
				t.Fatal(err)
			}
			if sum.Total.Count < 48 || sum.Total.Errors != 0 {
				t.Fatalf("total %+v", sum.Total)
			}
			methods := map[string]bool{}
			for _, a := range sum.APIs {
				methods[a.API] = true
				if a.Count == 0 || a.P50 <= 0 || a.P99 < a.P50 || a.Errors != 0 {
					t.Errorf("%s: %+v", a.API, a)
				}
				if a.API == "POST /grpc.testing.TestService/StreamingOutputCall" && a.Status["grpc-0"] != a.Count {
					t.Errorf("%s: status %v", a.API, a.Status)
				}
				if a.API == "POST /grpc.testing.TestService/UnaryCall" && (a.Status["grpc-0"] == 0 || a.Status["grpc-5"] == 0 || a.Status["grpc-0"]+a.Status["grpc-5"] != a.Count) {
					t.Errorf("%s: status %v (OK and NOT_FOUND answers)", a.API, a.Status)
				}
			}
			for _, m := range []string{"UnaryCall", "StreamingOutputCall", "StreamingInputCall", "FullDuplexCall"} {
				if !methods["POST /grpc.testing.TestService/"+m] {
					t.Errorf("no percentiles for %s: %v", m, methods)
				}
			}
			if !methods["POST /grpc.health.v1.Health/Check"] {
				t.Errorf("no percentiles for Health/Check: %v", methods)
			}
		})
	}
}
