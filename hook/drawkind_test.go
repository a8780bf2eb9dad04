package hook

import "testing"

// TestPackageKind: whose code a frame above a draw is. The test binary's
// main module is retrace's; pgx is a dependency: its math/rand draws are
// its own (appMathDraw), its crypto/rand draws through an id generator
// the application's (userDraw).
func TestPackageKind(t *testing.T) {
	for _, c := range []struct {
		pkg  string
		want uint8
	}{
		{"main", callerUser},
		{"github.com/retrace-dev/retrace/examples/ledger", callerUser},
		{"github.com/retrace-dev/retrace/hook", callerThrough},
		{"github.com/jackc/pgx/v5/pgxpool", callerDep},
		{"github.com/jackc/puddle/v2", callerDep},
		{"github.com/google/uuid", callerDep},
		{"example.com/not/in/the/build", callerDep},
		{"net/http", callerStd},
		{"database/sql", callerStd},
		{"math/rand/v2", callerThrough},
		{"vendor/golang.org/x/crypto/chacha20", callerStd},
	} {
		if got := packageKind(c.pkg); got != c.want {
			t.Errorf("packageKind(%q) = %d, want %d", c.pkg, got, c.want)
		}
	}
}
