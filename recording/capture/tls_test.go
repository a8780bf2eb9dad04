package capture

import (
	"crypto/tls"
	"testing"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/recording"
)

func TestTLSOfNamesAsCryptoTLS(t *testing.T) {
	for id := range 1 << 16 {
		if got, want := suiteName(uint16(id)), tls.CipherSuiteName(uint16(id)); got != want {
			t.Fatalf("suite %#04x: %q, crypto/tls says %q", id, got, want)
		}
	}
	ti := &hook.TLSInfo{ServerName: "pay.example.com", ALPN: "h2", Version: tls.VersionTLS12,
		CipherSuite: tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, Curve: tls.CurveP384}
	want := recording.TLS{On: true, ServerName: "pay.example.com", ALPN: "h2", Version: "TLS 1.2",
		CipherSuite: "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", Curve: "CurveP384"} // h2 is decoded: no note
	if got := tlsOf(ti); got != want {
		t.Fatalf("tlsOf = %+v, want %+v", got, want)
	}
	if got := tlsOf(&hook.TLSInfo{Version: tls.VersionTLS12, CipherSuite: tls.TLS_RSA_WITH_AES_128_GCM_SHA256}); got.Curve != "" {
		t.Fatalf("no group recorded as %q", got.Curve)
	}
	// once per recorded call: no allocation
	if n := testing.AllocsPerRun(100, func() { tlsOf(ti) }); n != 0 {
		t.Fatalf("tlsOf allocates %v times", n)
	}
}
