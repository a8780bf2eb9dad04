package agenttest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEachIDMatchesPattern: the mock's scanner finds exactly what
// IDPattern finds.
func TestEachIDMatchesPattern(t *testing.T) {
	a, b := NewID(), NewID()
	for _, in := range []string{
		"", "rt", "PING " + a + "\n", a + b, "xrt" + a[2:] + "rt0123", "rtrt" + a[2:],
		"*2\r\n$3\r\nGET\r\n$20\r\nk:" + a + "\r\n", "GET /echo/" + a + " HTTP/1.1\r\nX: " + b + "\r\n",
		"rt0123456789ABCDEF rt0123456789abcde", a[:17],
	} {
		var got []string
		eachID([]byte(in), func(id []byte) bool { got = append(got, string(id)); return true })
		want := IDPattern.FindAllString(in, -1)
		if len(got) != len(want) {
			t.Fatalf("%q: eachID found %q, IDPattern %q", in, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: eachID found %q, IDPattern %q", in, got, want)
			}
		}
	}
}
