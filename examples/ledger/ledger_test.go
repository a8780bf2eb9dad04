package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/examples/ledger"
	"github.com/retrace-dev/retrace/internal/testenv"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBadVariant(t *testing.T) {
	if _, err := ledger.NewServer(context.Background(), ledger.Config{PostgresURL: "postgres://u@127.0.0.1:1/x", Variant: "x"}); err == nil || !strings.Contains(err.Error(), `variant "x"`) {
		t.Fatalf("bad variant: %v", err)
	}
}

// TestTransfers runs the service against the test PostgreSQL: a transfer
// moves the money, one the payer cannot afford is refused, and the
// accounts show it.
func TestTransfers(t *testing.T) {
	ctx := context.Background()
	for _, variant := range []string{ledger.VariantNone, ledger.VariantChanged} {
		t.Run("variant="+variant, func(t *testing.T) {
			s, err := ledger.NewServer(ctx, ledger.Config{PostgresURL: scratchSchema(t, testenv.PostgresURL(t)), Variant: variant})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Setup(ctx); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(s.Version, "PostgreSQL ") {
				t.Errorf("version at start-up: %q", s.Version)
			}
			// twice: the second finds the table there
			for range 2 {
				if err := s.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
			}
			srv := httptest.NewServer(s)
			defer srv.Close()
			defer http.DefaultClient.CloseIdleConnections()
			post := func(body string) (int, map[string]any) {
				resp, err := http.Post(srv.URL+"/transfers", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var v map[string]any
				json.NewDecoder(resp.Body).Decode(&v)
				return resp.StatusCode, v
			}
			code, v := post(`{"from":1,"to":2,"amount":"12.50","memo":"rent"}`)
			to := "1012.50"
			if variant == ledger.VariantChanged {
				to = "1012.49"
			}
			if code != 201 || v["from"].(map[string]any)["balance"] != "987.50" || v["to"].(map[string]any)["balance"] != to {
				t.Fatalf("transfer: %d %v", code, v)
			}
			if code, _ := post(`{"from":3,"to":2,"amount":"5000","memo":"too much"}`); code != http.StatusConflict {
				t.Fatalf("unaffordable transfer: %d", code)
			}
			resp, err := http.Get(srv.URL + "/accounts/1")
			if err != nil {
				t.Fatal(err)
			}
			var acct struct {
				Balance string
				Entries []struct{ Amount, Memo string }
			}
			json.NewDecoder(resp.Body).Decode(&acct)
			resp.Body.Close()
			if acct.Balance != "987.50" || len(acct.Entries) != 1 || acct.Entries[0].Amount != "-12.50" || acct.Entries[0].Memo != "rent" {
				t.Fatalf("account 1: %+v", acct)
			}
			resp, err = http.Get(srv.URL + "/accounts/999")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Fatalf("unknown account: %d", resp.StatusCode)
			}
		})
	}
}

// scratchSchema returns url with a search_path of a schema of its own,
// dropped when the test ends.
func scratchSchema(t *testing.T, url string) string {
	schema := fmt.Sprintf("ledger_test_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), url)
		if err == nil {
			conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			conn.Close(context.Background())
		}
	})
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}
