package pricing_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/examples/pricing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPrice(t *testing.T) {
	h := pricing.NewHandler()
	cases := []struct {
		name   string
		query  string
		code   int
		skus   []string
		chanel string
		errSub string
	}{
		{name: "one", query: "sku=KB-101", code: 200, skus: []string{"KB-101"}},
		{name: "repeated", query: "sku=KB-101&sku=MS-220", code: 200, skus: []string{"KB-101", "MS-220"}},
		{name: "comma list", query: "sku=KB-101,%20MS-220", code: 200, skus: []string{"KB-101", "MS-220"}},
		{name: "channel", query: "sku=CB-010&channel=web", code: 200, skus: []string{"CB-010"}, chanel: "web"},
		{name: "missing", query: "", code: 400, errSub: "missing query parameter sku"},
		{name: "unknown", query: "sku=KB-101&sku=NOPE", code: 404, errSub: `unknown sku "NOPE"`},
		{name: "too many", query: "sku=" + strings.Repeat("KB-101,", pricing.MaxSKUs+1), code: 400, errSub: "at most"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/price?"+tc.query, nil))
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.code, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if tc.code != 200 {
				var e struct{ Error string }
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || !strings.Contains(e.Error, tc.errSub) {
					t.Fatalf("error body %s, want one containing %q", rec.Body, tc.errSub)
				}
				return
			}
			var q pricing.Quote
			if err := json.Unmarshal(rec.Body.Bytes(), &q); err != nil {
				t.Fatal(err)
			}
			if q.Currency != pricing.Currency || q.Channel != tc.chanel || len(q.Prices) != len(tc.skus) {
				t.Fatalf("quote %+v", q)
			}
			for i, s := range tc.skus {
				want, _ := pricing.Lookup(s)
				if q.Prices[i] != want {
					t.Errorf("prices[%d] = %+v, want %+v", i, q.Prices[i], want)
				}
			}
		})
	}
}

func TestCatalogIsACopy(t *testing.T) {
	c := pricing.Catalog()
	c[0].UnitCents = -1
	if it, _ := pricing.Lookup(c[0].SKU); it.UnitCents < 0 {
		t.Fatal("Catalog returned the package's own slice")
	}
	if len(pricing.SKUs()) != len(c) {
		t.Fatal("SKUs and Catalog disagree")
	}
}

func TestOverHTTP(t *testing.T) {
	srv := httptest.NewServer(pricing.NewHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/price?sku=MN-270")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var q pricing.Quote
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || q.Prices[0].UnitCents != 27900 {
		t.Fatalf("quote %+v, err %v", q, err)
	}
	srv.Client().CloseIdleConnections()
}

// FuzzPrice checks that no query string makes the service fail or answer
// anything but JSON with a 200, 400 or 404.
func FuzzPrice(f *testing.F) {
	for _, s := range []string{"sku=KB-101", "sku=KB-101,MS-220&channel=x", "", "sku=%zz", "sku=,,,", "sku=a&sku=b"} {
		f.Add(s)
	}
	h := pricing.NewHandler()
	f.Fuzz(func(t *testing.T, q string) {
		req, err := http.NewRequest(http.MethodGet, "/price", nil)
		if err != nil {
			t.Skip()
		}
		req.URL.RawQuery = q
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 404:
		default:
			t.Fatalf("query %q: status %d", q, rec.Code)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("query %q: body %q is not JSON", q, rec.Body)
		}
	})
}
