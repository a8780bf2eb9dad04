package hook

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/trace"
)

func TestTLSNamesRoundTrip(t *testing.T) {
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11, tls.VersionTLS12, tls.VersionTLS13} {
		got, ok := versionByName(tls.VersionName(v))
		require.True(t, ok, tls.VersionName(v))
		require.Equal(t, v, got)
	}
	for _, list := range [][]*tls.CipherSuite{tls.CipherSuites(), tls.InsecureCipherSuites()} {
		for _, c := range list {
			got, ok := suiteByName(tls.CipherSuiteName(c.ID))
			require.True(t, ok, c.Name)
			require.Equal(t, c.ID, got)
		}
	}
	for _, c := range []tls.CurveID{tls.X25519MLKEM768, tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521,
		tls.SecP256r1MLKEM768, tls.SecP384r1MLKEM1024, 0x7777} {
		got, ok := curveByName(c.String())
		require.True(t, ok, c.String())
		require.Equal(t, c, got)
	}
	// crypto/tls's names of values it does not know
	v, ok := versionByName(tls.VersionName(0x7f1c))
	require.True(t, ok)
	require.Equal(t, uint16(0x7f1c), v)
	s, ok := suiteByName(tls.CipherSuiteName(0xabcd))
	require.True(t, ok)
	require.Equal(t, uint16(0xabcd), s)
	for _, bad := range []string{"", "TLS 1.4", "0x", "0x12345", "0xZZZZ", "CurveID(", "CurveID(70000)", "CurveID(12"} {
		_, v := versionByName(bad)
		_, s := suiteByName(bad)
		_, c := curveByName(bad)
		require.False(t, v || s || c, "%q parsed", bad)
	}
}

func FuzzTLSNames(f *testing.F) {
	for _, s := range []string{"TLS 1.3", "TLS_AES_128_GCM_SHA256", "X25519MLKEM768", "0x1301", "CurveID(77)", "SSLv3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// whatever parses names a value whose name parses to it again
		if v, ok := versionByName(s); ok {
			if w, ok := versionByName(tls.VersionName(v)); !ok || w != v {
				t.Fatalf("version %q: %#x, whose name %q parses to %#x", s, v, tls.VersionName(v), w)
			}
		}
		if v, ok := suiteByName(s); ok {
			if w, ok := suiteByName(tls.CipherSuiteName(v)); !ok || w != v {
				t.Fatalf("suite %q: %#x, whose name parses to %#x", s, v, w)
			}
		}
		if v, ok := curveByName(s); ok {
			if w, ok := curveByName(v.String()); !ok || w != v {
				t.Fatalf("curve %q: %d, whose name parses to %d", s, v, w)
			}
		}
	})
}

func TestSNIName(t *testing.T) {
	for in, want := range map[string]string{"": "", "pay.example.com": "pay.example.com", "pay.example.com.": "pay.example.com",
		"127.0.0.1": "", "::1": "", "[::1]": "", "fe80::1%eth0": "", "localhost": "localhost"} {
		require.Equal(t, want, sniName(in), in)
	}
}

func TestRecordedStateFitsTheClient(t *testing.T) {
	h2 := trace.TLSFacts{ALPN: "h2", Version: "TLS 1.3", CipherSuite: "TLS_AES_256_GCM_SHA384", Curve: "X25519", Calls: 9}
	h1 := trace.TLSFacts{ALPN: "http/1.1", Version: "TLS 1.2", CipherSuite: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", Curve: "CurveP256", Calls: 3}
	a := &trace.TLSAnswer{Recorded: "pay:443", Facts: []trace.TLSFacts{h2, h1}}

	st, other, ok := recordedState(a, &tls.Config{NextProtos: []string{"h2", "http/1.1"}})
	require.True(t, ok)
	require.Empty(t, other)
	require.Equal(t, replayState{vers: tls.VersionTLS13, suite: tls.TLS_AES_256_GCM_SHA384, curve: tls.X25519, alpn: "h2", recorded: true}, st)

	// a client that does not offer h2 gets the recorded http/1.1 handshake
	st, other, ok = recordedState(a, &tls.Config{NextProtos: []string{"http/1.1"}})
	require.True(t, ok)
	require.Empty(t, other)
	require.Equal(t, replayState{vers: tls.VersionTLS12, suite: tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, curve: tls.CurveP256, alpn: "http/1.1", recorded: true}, st)

	// nor one its versions exclude: a TLS 1.3 client that offers
	// http/1.1 gets the recorded TLS 1.3 handshake, with http/1.1
	st, other, ok = recordedState(a, &tls.Config{NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS13})
	require.True(t, ok)
	require.Equal(t, "h2", other)
	require.Equal(t, replayState{vers: tls.VersionTLS13, suite: tls.TLS_AES_256_GCM_SHA384, curve: tls.X25519, alpn: "http/1.1", recorded: true}, st)
	_, _, ok = recordedState(a, &tls.Config{NextProtos: []string{"http/1.1"}, MaxVersion: tls.VersionTLS11})
	require.False(t, ok)
	// a client that offers none of the recorded protocols: the best
	// recorded handshake, with the ALPN its offer gets
	st, other, ok = recordedState(a, &tls.Config{})
	require.True(t, ok)
	require.Equal(t, "h2", other)
	require.Equal(t, replayState{vers: tls.VersionTLS13, suite: tls.TLS_AES_256_GCM_SHA384, curve: tls.X25519, recorded: true}, st)
	st, other, ok = recordedState(a, &tls.Config{NextProtos: []string{"spdy/3"}, MaxVersion: tls.VersionTLS12})
	require.True(t, ok)
	require.Equal(t, "http/1.1", other)
	require.Equal(t, replayState{vers: tls.VersionTLS12, suite: tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, curve: tls.CurveP256, recorded: true}, st)

	// a handshake with no ALPN fits any client; no group (RSA key exchange) is none
	none := &trace.TLSAnswer{Facts: []trace.TLSFacts{{Version: "TLS 1.2", CipherSuite: "TLS_RSA_WITH_AES_128_GCM_SHA256"}}}
	st, _, ok = recordedState(none, &tls.Config{NextProtos: []string{"h2"}})
	require.True(t, ok)
	require.Equal(t, replayState{vers: tls.VersionTLS12, suite: tls.TLS_RSA_WITH_AES_128_GCM_SHA256, recorded: true}, st)

	// names this release does not know are skipped
	odd := &trace.TLSAnswer{Facts: []trace.TLSFacts{{Version: "TLS 9"}, {Version: "TLS 1.3", CipherSuite: "TLS_NEW"}}}
	_, _, ok = recordedState(odd, nil)
	require.False(t, ok)

	require.Equal(t, replayState{vers: tls.VersionTLS13, suite: tls.TLS_AES_128_GCM_SHA256, curve: tls.X25519MLKEM768, alpn: "h2"},
		plausibleState(&tls.Config{NextProtos: []string{"h2"}}))
	require.Equal(t, replayState{vers: tls.VersionTLS13, suite: tls.TLS_AES_128_GCM_SHA256, curve: tls.CurveP256, alpn: "http/1.1"},
		plausibleState(&tls.Config{NextProtos: []string{"h2", "http/1.1"}, CurvePreferences: []tls.CurveID{tls.CurveP256}}))
}

// factsMock answers TLS queries as the mock server does, counting them.
func factsMock(t *testing.T, answer func(q trace.TLSQuery) trace.TLSAnswer, asked *atomic.Int32) string {
	return serveTCP(t, func(c net.Conn) {
		defer c.Close()
		fr := trace.NewFrameReader(c, 0)
		for {
			h, p, err := fr.Next()
			if err != nil {
				return
			}
			if h.Dst != trace.TLSDst {
				t.Errorf("frame to %q", h.Dst)
				return
			}
			if h.Len == 0 {
				continue
			}
			var q trace.TLSQuery
			if err := json.Unmarshal(p, &q); err != nil {
				t.Errorf("query %q: %v", p, err)
				return
			}
			asked.Add(1)
			b, _ := json.Marshal(answer(q))
			if _, err := c.Write(append(b, '\n')); err != nil {
				return
			}
		}
	})
}

func TestTLSFactsClientKeepsAnswers(t *testing.T) {
	var asked atomic.Int32
	addr := factsMock(t, func(q trace.TLSQuery) trace.TLSAnswer {
		return trace.TLSAnswer{Recorded: q.Dst, Facts: []trace.TLSFacts{{ServerName: q.ServerName, ALPN: strings.Join(q.ALPN, "+")}}}
	}, &asked)
	r := &tlsFactsClient{addr: addr}
	defer r.close()
	now := time.Now()
	q := trace.TLSQuery{Dst: "pay:443", ServerName: "pay", ALPN: []string{"h2", "http/1.1"}}
	for range 3 {
		a, err := r.facts(now, "rt1", &q)
		require.NoError(t, err)
		require.Equal(t, trace.TLSAnswer{Recorded: "pay:443", Facts: []trace.TLSFacts{{ServerName: "pay", ALPN: "h2+http/1.1"}}}, a)
	}
	require.EqualValues(t, 1, asked.Load(), "a kept answer is not asked again")
	q2 := q
	q2.ALPN = []string{"http/1.1"}
	a, err := r.facts(now, "", &q2)
	require.NoError(t, err)
	require.Equal(t, "http/1.1", a.Facts[0].ALPN, "another offer is another question")
	_, err = r.facts(now.Add(tlsFactsTTL), "", &q)
	require.NoError(t, err)
	require.EqualValues(t, 3, asked.Load(), "an answer is kept for tlsFactsTTL")

	// the mock closed the connection since: asked again on a new one
	r.mu.Lock()
	r.c.Close()
	r.mu.Unlock()
	_, err = r.facts(now.Add(3*tlsFactsTTL), "", &q)
	require.NoError(t, err)
	require.EqualValues(t, 4, asked.Load())
}

func TestTLSFactsClientOfAnOlderMock(t *testing.T) {
	// a mock server that does not know trace.TLSDst closes the connection
	var conns atomic.Int32
	addr := serveTCP(t, func(c net.Conn) {
		conns.Add(1)
		buf := make([]byte, 512)
		c.Read(buf)
		c.Close()
	})
	r := &tlsFactsClient{addr: addr}
	defer r.close()
	now := time.Now()
	q := trace.TLSQuery{Dst: "pay:443"}
	_, err := r.facts(now, "", &q)
	require.ErrorContains(t, err, "does not answer "+trace.TLSDst)
	n := conns.Load()
	_, err = r.facts(now.Add(time.Second), "", &q)
	require.Error(t, err)
	require.Equal(t, n, conns.Load(), "not asked again for tlsFactsPause")
	_, err = r.facts(now.Add(tlsFactsPause), "", &q)
	require.Error(t, err)
	require.Greater(t, conns.Load(), n, "asked again after tlsFactsPause")

	// nobody listening: an error at once
	r2 := &tlsFactsClient{addr: "127.0.0.1:1"}
	_, err = r2.facts(now, "", &q)
	require.Error(t, err)
}

// TestReplayTLSStateFailsOpen: a panic while the recorded state is looked
// up leaves the handshake the plausible state, and is counted.
func TestReplayTLSStateFailsOpen(t *testing.T) {
	tlsFactsPanic.Store(true)
	defer tlsFactsPanic.Store(false)
	e := &engine{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg := &tls.Config{NextProtos: []string{"h2"}}
	before := counters.failures.Load()
	require.Equal(t, plausibleState(cfg), e.replayTLSState(cfg, "pay:443"))
	require.Equal(t, before+1, counters.failures.Load())
}

// TestTLSFactsClientAsksOncePerPool: handshakes of a pool's connections
// at once ask the mock server once.
func TestTLSFactsClientAsksOncePerPool(t *testing.T) {
	var asked atomic.Int32
	addr := factsMock(t, func(q trace.TLSQuery) trace.TLSAnswer {
		time.Sleep(20 * time.Millisecond) // all of them waiting
		return trace.TLSAnswer{Recorded: q.Dst}
	}, &asked)
	r := &tlsFactsClient{addr: addr}
	defer r.close()
	now := time.Now()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			q := trace.TLSQuery{Dst: "redis:6380"}
			if _, err := r.facts(now, "", &q); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, asked.Load())
}
