package orders_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/retrace-dev/retrace/examples/orders"
)

// FuzzCreateOrder feeds arbitrary bodies to POST /orders with every
// downstream unreachable: the service must answer JSON with a 4xx for a bad
// body and a 502 for a valid one, never panic or hang.
func FuzzCreateOrder(f *testing.F) {
	for _, s := range []string{
		`{"user_id":7,"items":[{"sku":"KB-101","qty":1}],"coupon":"WELCOME10"}`,
		`{"user_id":0,"items":[]}`, `{"items":[{"sku":"","qty":-1}]}`, `[]`, `null`, ``, `{"user_id":1e99}`,
	} {
		f.Add(s)
	}
	srv, err := orders.NewServer(orders.Config{MySQLDSN: "u@tcp(127.0.0.1:1)/d?timeout=1s", RedisAddr: "127.0.0.1:1", PricingURL: "http://127.0.0.1:1"})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { srv.Close() })
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest("POST", "/orders", strings.NewReader(body)))
		if rec.Code != 400 && rec.Code != 413 && rec.Code != 502 {
			t.Fatalf("body %q: status %d %s", body, rec.Code, rec.Body)
		}
		var e struct{ Error string }
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
			t.Fatalf("body %q: answer %q is not a JSON error", body, rec.Body)
		}
	})
}
