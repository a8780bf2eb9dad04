package demo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/examples/pricing"
)

func TestOrdersOnEmbedded(t *testing.T) {
	m, err := StartMySQL("127.0.0.1:0", "orders")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := miniredis.NewMiniRedis()
	if err := r.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := httptest.NewServer(pricing.NewHandler())
	defer p.Close()
	srv, err := orders.NewServer(orders.Config{MySQLDSN: m.DSN(), RedisAddr: r.Addr(), PricingURL: p.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Setup(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ m, p, b string }{
		{"POST", "/orders", `{"user_id":7,"items":[{"sku":"KB-101","qty":1},{"sku":"CB-010","qty":2}],"coupon":"WELCOME10"}`},
		{"GET", "/orders/ORD-00000001", ""},
		{"GET", "/users/7/orders", ""},
		{"GET", "/stock/CB-010", ""},
		{"POST", "/orders", `{"user_id":999,"items":[{"sku":"KB-101","qty":1}]}`},
	} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(c.m, c.p, strings.NewReader(c.b)))
		t.Logf("%s %s -> %d %s", c.m, c.p, rec.Code, rec.Body)
		if rec.Code >= 500 {
			t.Errorf("%s %s: %d", c.m, c.p, rec.Code)
		}
	}
	_ = http.StatusOK
}
