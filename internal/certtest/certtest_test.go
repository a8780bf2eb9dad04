package certtest

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A leaf verifies against the CA's pool for its hosts and no other, and
// the files WriteLeaf writes load as a key pair.
func TestLeafVerifies(t *testing.T) {
	ca := New(t)
	dir := t.TempDir()
	certFile, keyFile, err := ca.WriteLeaf(dir, "127.0.0.1", "svc.local")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for host, ok := range map[string]bool{"127.0.0.1": true, "svc.local": true, "other.local": false} {
		_, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host})
		if (err == nil) != ok {
			t.Errorf("%s: verify error %v, want ok=%v", host, err, ok)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: New(t).Pool()}); err == nil {
		t.Error("a leaf verified against another CA")
	}
	if p, err := ca.WritePEM(dir); err != nil || p == "" {
		t.Fatalf("WritePEM: %q %v", p, err)
	}
}
