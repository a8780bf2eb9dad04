package e2e_test

import (
	"context"
	"crypto/tls"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/go-sql-driver/mysql"
	goredis "github.com/redis/go-redis/v9"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/certtest"
	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// stateOf is what a test compares of a ConnectionState: everything a
// handshake negotiates that a replay hands back.
func stateOf(cs tls.ConnectionState) string {
	return fmt.Sprintf("complete=%v version=%q suite=%q curve=%v alpn=%q sni=%q resumed=%v",
		cs.HandshakeComplete, tls.VersionName(cs.Version), tls.CipherSuiteName(cs.CipherSuite), cs.CurveID,
		cs.NegotiatedProtocol, cs.ServerName, cs.DidResume)
}

// recordedStateOf is stateOf for a recorded call's TLS fields, with the
// server name crypto/tls would send.
func recordedStateOf(t recording.TLS, sni string) string {
	return fmt.Sprintf("complete=true version=%q suite=%q curve=%s alpn=%q sni=%q resumed=false",
		t.Version, t.CipherSuite, t.Curve, t.ALPN, sni)
}

// stateService answers each request with the ConnectionState of the HTTPS
// call it made (net/http, on a pooled connection) and of the MySQL
// connection its query ran on, so that a replay, whose answers must equal
// the recorded ones, shows the states recorded; the go-redis connections'
// states are kept by the dialer (go-redis keeps its net.Conn to itself).
type stateService struct {
	base string
	hc   *http.Client
	rdb  *goredis.Client
	db   *sql.DB
	key  string

	mu         sync.Mutex
	redisState []string
}

func newStateService(t *testing.T, base string, httpsCfg *tls.Config, caFile, prefix string) *stateService {
	t.Helper()
	s := &stateService{base: base, key: prefix}
	tr := &http.Transport{TLSClientConfig: httpsCfg, MaxIdleConnsPerHost: 4}
	s.hc = &http.Client{Transport: tr, Timeout: 10 * time.Second}

	raddr, _ := testenv.RedisTLSAddr(t)
	// TLS 1.2 at most, so that the recorded state is not the one a replay
	// would make up (TLS 1.3)
	rcfg := &tls.Config{RootCAs: caPool(t, caFile), ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12}
	s.rdb = goredis.NewClient(&goredis.Options{Addr: raddr, PoolSize: 4, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			// go-redis's own dialer, keeping the handshake's state
			nc, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(nc, rcfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				nc.Close()
				return nil, err
			}
			s.mu.Lock()
			s.redisState = append(s.redisState, stateOf(tc.ConnectionState()))
			s.mu.Unlock()
			return tc, nil
		}})

	dsn, _ := testenv.MySQLTLSDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfigSeq++
	name := fmt.Sprintf("retrace-e2e-tlsstate-%d", tlsConfigSeq)
	if err := mysql.RegisterTLSConfig(name, &tls.Config{RootCAs: caPool(t, caFile), ServerName: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	cfg.TLSConfig = name
	if s.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	s.db.SetMaxOpenConns(4)
	s.db.SetMaxIdleConns(4)
	return s
}

// mysqlTLS is the ConnectionState of the TLS connection under a
// go-sql-driver/mysql connection (its unexported netConn: the driver
// offers no accessor).
func mysqlTLS(dc any) (tls.ConnectionState, error) {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return tls.ConnectionState{}, fmt.Errorf("driver connection %T", dc)
	}
	f := v.Elem().FieldByName("netConn")
	if !f.IsValid() || f.Type() != reflect.TypeFor[net.Conn]() {
		return tls.ConnectionState{}, fmt.Errorf("driver connection %T has no netConn", dc)
	}
	nc := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface()
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return tls.ConnectionState{}, fmt.Errorf("the driver's connection is a %T, not TLS", nc)
	}
	return tc.ConnectionState(), nil
}

func (s *stateService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	i := r.URL.Query().Get("i")
	resp, err := s.hc.Get(s.base + "/price?item=" + i)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.TLS == nil {
		http.Error(w, "the HTTPS response has no TLS state", http.StatusBadGateway)
		return
	}
	key := s.key + ":" + i
	if err := s.rdb.Set(ctx, key, "item="+i, time.Minute).Err(); err != nil {
		http.Error(w, "redis: "+err.Error(), http.StatusBadGateway)
		return
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		http.Error(w, "mysql: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer conn.Close()
	var mstate tls.ConnectionState
	if err := conn.Raw(func(dc any) (err error) { mstate, err = mysqlTLS(dc); return err }); err != nil {
		http.Error(w, "mysql: "+err.Error(), http.StatusBadGateway)
		return
	}
	var row string
	if err := conn.QueryRowContext(ctx, "SELECT CONCAT('item=', ?)", i).Scan(&row); err != nil {
		http.Error(w, "mysql: "+err.Error(), http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "%s\nhttps %s\n%s\nmysql %s\n", body, stateOf(*resp.TLS), row, stateOf(mstate))
}

func (s *stateService) close() {
	s.hc.CloseIdleConnections()
	s.rdb.Close()
	s.db.Close()
}

func (s *stateService) redisStates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.redisState)
}

// TestReplayConnectionStateAsRecorded: the ConnectionState that net/http,
// go-sql-driver/mysql and go-redis see on a replayed TLS connection — whose
// handshake the agent completes without TLS — is the one they saw when the
// service was recorded: version, cipher suite, key exchange group and ALPN
// as the servers negotiated them (an HTTPS provider held to TLS 1.2 with
// one suite and P-384, a Redis client held to TLS 1.2, MariaDB as it
// chooses), the server name crypto/tls sends. Replayed with the provider
// gone and clients that trust no CA, so no real server can have answered.
func TestReplayConnectionStateAsRecorded(t *testing.T) {
	_, caFile := testenv.RedisTLSAddr(t)
	ca := certtest.New(t)
	provider := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s item=%s", r.URL.Path, r.URL.Query().Get("item"))
	}))
	provider.TLS = ca.ServerConfig(t)
	provider.TLS.MaxVersion = tls.VersionTLS12
	provider.TLS.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}
	provider.TLS.CurvePreferences = []tls.CurveID{tls.CurveP384}
	provider.StartTLS()
	base := provider.URL
	httpsCfg := ca.ClientConfig()
	httpsCfg.ServerName = "localhost"
	httpsCfg.NextProtos = []string{"http/1.1"}
	prefix := "retrace-e2e-tlsstate-" + trace.NewID()[:8]
	svc := newStateService(t, base, httpsCfg, caFile, prefix)
	before := hook.ReadStats()
	rec := recordRun(t, svc, func() { svc.close(); provider.Close() })
	recRedis := svc.redisStates()

	wantHTTPS := stateOf(tls.ConnectionState{HandshakeComplete: true, Version: tls.VersionTLS12,
		CipherSuite: tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, CurveID: tls.CurveP384,
		NegotiatedProtocol: "http/1.1", ServerName: "localhost"})
	sessions := rec.sessions(t)
	var mysqlState string
	for i, tid := range rec.tids {
		lines := strings.Split(rec.want[i], "\n")
		if len(lines) != 5 || lines[1] != "https "+wantHTTPS || !strings.HasPrefix(lines[3], "mysql complete=true") {
			t.Fatalf("recording request %d: %q, want the HTTPS state %s", i, rec.want[i], wantHTTPS)
		}
		if mysqlState == "" {
			mysqlState = lines[3]
		} else if lines[3] != mysqlState {
			t.Fatalf("request %d: MySQL connections negotiated differently: %s and %s", i, lines[3], mysqlState)
		}
		// the recording says what the clients saw
		s := sessions[tid]
		if s == nil {
			t.Fatalf("request %d: no session", i)
		}
		for _, c := range s.Calls {
			if c.Setup || !c.TLS.On {
				continue
			}
			var want string
			switch c.Proto {
			case recording.ProtoHTTP:
				want = strings.TrimPrefix(lines[1], "https ")
			case recording.ProtoMySQL:
				want = strings.TrimPrefix(lines[3], "mysql ")
			case recording.ProtoRedis:
				want = recRedis[0]
			default:
				continue
			}
			sni := c.TLS.ServerName // the client's configured name: none in SNI for an address
			if net.ParseIP(sni) != nil {
				sni = ""
			}
			if got := recordedStateOf(c.TLS, sni); got != want {
				t.Errorf("request %d: %s call recorded TLS %s, the client saw %s", i, c.Proto, got, want)
			}
		}
	}
	if len(recRedis) == 0 {
		t.Fatal("go-redis dialled no connection")
	}
	for _, s := range recRedis {
		if s != recRedis[0] || !strings.Contains(s, `version="TLS 1.2"`) {
			t.Fatalf("go-redis connections negotiated %q", recRedis)
		}
	}

	t.Logf("recorded states: HTTPS %s; MySQL %s; go-redis %s", wantHTTPS, mysqlState, recRedis[0])

	// replay: the provider is gone, the clients trust no CA
	replayCfg := &tls.Config{ServerName: "localhost", NextProtos: []string{"http/1.1"}}
	svc = newStateService(t, base, replayCfg, "", prefix)
	mid := hook.ReadStats()
	replayRun(t, rec, svc, svc.close) // every answer, with its states, as recorded
	after := hook.ReadStats()
	for _, s := range svc.redisStates() {
		if s != recRedis[0] {
			t.Errorf("replayed go-redis connection: %s, recorded %s", s, recRedis[0])
		}
	}
	if len(svc.redisStates()) == 0 {
		t.Error("go-redis dialled no connection in replay")
	}
	faked, recorded := after.TLSHandshakes-mid.TLSHandshakes, after.TLSRecorded-mid.TLSRecorded
	if faked == 0 || recorded != faked {
		t.Errorf("replay: %d handshakes completed without TLS, %d of them with the recorded state", faked, recorded)
	}
	if before.TLSRecorded != mid.TLSRecorded {
		t.Errorf("record mode counted %d recorded replay states", mid.TLSRecorded-before.TLSRecorded)
	}
}
