package demo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retrace-dev/retrace/examples/orders"
)

// TestDownstreamsAndTraffic runs the orders example in-process on the
// embedded downstreams (go-mysql-server must speak go-sql-driver's prepared
// statements, miniredis go-redis pipelines), sends demo traffic, and checks
// that Stop and Restart keep the data.
func TestDownstreamsAndTraffic(t *testing.T) {
	ctx := context.Background()
	d, err := StartDownstreams(ctx, DownstreamAddrs{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	srv, err := orders.NewServer(d.OrdersConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()

	st, err := Traffic{BaseURL: hs.URL, Requests: 200, Clients: 8, Seed: 1}.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Requests != 200 || st.Errors != 0 || st.ByStatus[http.StatusCreated] < 50 || len(st.ByAPI) != 4 {
		t.Fatalf("stats %+v", st)
	}
	for code, n := range st.ByStatus {
		if code >= 500 {
			t.Errorf("%d answers with status %d", n, code)
		}
	}
	t.Logf("%+v", st)

	mysqlAddr, redisAddr, priceURL := d.MySQL.Addr(), d.RedisAddr(), d.PricingURL()
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/stock/KB-101", nil))
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("with downstreams stopped: %d %s", rec.Code, rec.Body)
	}
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	if d.MySQL.Addr() != mysqlAddr || d.RedisAddr() != redisAddr || d.PricingURL() != priceURL {
		t.Fatal("addresses changed on restart")
	}
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/orders/100000001", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("after restart: %d %s", rec.Code, rec.Body)
	}
}
