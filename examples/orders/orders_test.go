package orders_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/retrace-dev/retrace/examples/fraud"
	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/examples/orders/orderstest"
	"github.com/retrace-dev/retrace/examples/pricing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is one orders service over real MariaDB and Redis, with the pricing
// requests it made.
type env struct {
	t       *testing.T
	cfg     orders.Config
	srv     *orders.Server
	http    *httptest.Server
	mu      sync.Mutex
	pricing []string // request URIs seen by the pricing service
	fraud   []string // methods called on the fraud service
	totals  []int64  // total_cents of each fraud Check
}

func newEnv(t *testing.T, variant string) *env {
	e := &env{t: t}
	p := orderstest.Pricing(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.mu.Lock()
			e.pricing = append(e.pricing, r.URL.RequestURI())
			e.mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	e.cfg = orderstest.Config(t, p.URL)
	e.cfg.FraudAddr = orderstest.Fraud(t,
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			e.noteFraud(info.FullMethod)
			m := req.(proto.Message).ProtoReflect()
			e.mu.Lock()
			e.totals = append(e.totals, m.Get(m.Descriptor().Fields().ByName("total_cents")).Int())
			e.mu.Unlock()
			return h(ctx, req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			e.noteFraud(info.FullMethod)
			return h(srv, ss)
		}))
	e.cfg.Variant = variant
	srv, err := orders.NewServer(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.http = httptest.NewServer(srv)
	t.Cleanup(func() {
		e.http.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return e
}

func (e *env) noteFraud(method string) {
	e.mu.Lock()
	e.fraud = append(e.fraud, method)
	e.mu.Unlock()
}

func (e *env) do(method, path string, body any) (int, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.http.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.http.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

func TestOrderLifecycle(t *testing.T) {
	e := newEnv(t, orders.VariantNormal)
	user := orders.SeedUser(7)
	before := time.Now().UTC().Add(-time.Second)
	code, body := e.do("POST", "/orders", orders.CreateOrder{UserID: 7,
		Items: []orders.OrderItem{{SKU: "KB-101", Qty: 1}, {SKU: "CB-010", Qty: 3}}, Coupon: "WELCOME10"})
	if code != http.StatusCreated {
		t.Fatalf("POST /orders: %d %s", code, body)
	}
	o := decode[orders.Order](t, body)
	if o.ID != "100000001" || o.Status != "created" || o.UserID != 7 || o.Currency != "EUR" {
		t.Fatalf("order %+v", o)
	}
	if o.CreatedAt.Before(before) || o.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("created_at %v is not now", o.CreatedAt)
	}
	kb, _ := pricing.Lookup("KB-101")
	cb, _ := pricing.Lookup("CB-010")
	sub := kb.UnitCents + 3*cb.UnitCents
	if o.SubtotalCents != sub || o.DiscountCents != sub*10/100 {
		t.Errorf("subtotal %d discount %d, want %d and %d", o.SubtotalCents, o.DiscountCents, sub, sub/10)
	}
	wantShip := int64(0)
	if sub-sub/10 < orders.FreeShipping {
		wantShip = map[string]int64{"DE": 490, "FR": 690, "NL": 590, "IT": 790, "ES": 790, "AT": 590, "BE": 590, "US": 1990}[user.Country]
	}
	if o.ShippingCents != wantShip || o.TotalCents != o.SubtotalCents-o.DiscountCents+o.ShippingCents {
		t.Errorf("shipping %d total %d (country %s)", o.ShippingCents, o.TotalCents, user.Country)
	}

	code, body = e.do("GET", "/orders/"+o.ID, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /orders/%s: %d %s", o.ID, code, body)
	}
	got := decode[orders.Order](t, body)
	if !got.CreatedAt.Equal(o.CreatedAt) {
		t.Errorf("stored created_at %v, returned %v", got.CreatedAt, o.CreatedAt)
	}
	got.CreatedAt = o.CreatedAt
	if fmt.Sprint(got) != fmt.Sprint(o) {
		t.Errorf("stored order\n%+v\nreturned\n%+v", got, o)
	}

	code, body = e.do("GET", "/users/7/orders", nil)
	uo := decode[orders.UserOrders](t, body)
	if code != http.StatusOK || len(uo.Orders) != 1 || uo.Orders[0].ID != o.ID || uo.Orders[0].TotalCents != o.TotalCents {
		t.Fatalf("GET /users/7/orders: %d %s", code, body)
	}
	code, body = e.do("GET", "/stock/CB-010", nil)
	if st := decode[orders.Stock](t, body); code != http.StatusOK || st.Units != orders.SeedStock-3 {
		t.Fatalf("GET /stock/CB-010: %d %s", code, body)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.pricing) != 1 || e.pricing[0] != "/price?sku=KB-101&sku=CB-010" {
		t.Errorf("pricing requests %q", e.pricing)
	}
	if fmt.Sprint(e.fraud) != fmt.Sprint([]string{fraud.ScreenMethod, fraud.CheckMethod}) {
		t.Errorf("fraud calls %q", e.fraud)
	}
	if len(e.totals) != 1 || e.totals[0] != o.TotalCents {
		t.Errorf("fraud checks of totals %v, want [%d]", e.totals, o.TotalCents)
	}
}

// TestFraudRefuses: an order the fraud check refuses is a 422 with its
// score and reasons, and is not stored; with the fraud service down, a 502
// naming it.
func TestFraudRefuses(t *testing.T) {
	e := newEnv(t, orders.VariantNormal)
	const uid = 15 // ships to the US, standard tier
	if u := orders.SeedUser(uid); u.Country != "US" || u.Tier != "standard" {
		t.Fatalf("seed user %d is %+v", uid, u)
	}
	big := orders.CreateOrder{UserID: uid, Items: []orders.OrderItem{{"MN-270", 3}, {"DK-500", 3}, {"HD-330", 1}}}
	code, b := e.do("POST", "/orders", big)
	var er struct{ Error string }
	json.Unmarshal(b, &er)
	if code != http.StatusUnprocessableEntity || !strings.Contains(er.Error, "refused by the fraud check: score 105") ||
		!strings.Contains(er.Error, "ships outside the EU (US)") {
		t.Fatalf("%d %s", code, b)
	}
	if code, b := e.do("POST", "/orders", orders.CreateOrder{UserID: uid, Items: []orders.OrderItem{{"CB-010", 1}}}); code != http.StatusCreated {
		t.Fatalf("small order of the same user: %d %s", code, b)
	}
	code, b = e.do("GET", "/users/15/orders", nil)
	if uo := decode[orders.UserOrders](t, b); code != 200 || len(uo.Orders) != 1 {
		t.Fatalf("orders of user 15: %s", b)
	}

	cfg := e.cfg
	cfg.FraudAddr = "127.0.0.1:1"
	srv, err := orders.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("POST", "/orders", strings.NewReader(`{"user_id":1,"items":[{"sku":"KB-101","qty":1}]}`)))
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "fraud screen") {
		t.Fatalf("fraud service down: %d %s", rec.Code, rec.Body)
	}
}

func TestOrderErrors(t *testing.T) {
	e := newEnv(t, orders.VariantNormal)
	rdb := redis.NewClient(&redis.Options{Addr: e.cfg.RedisAddr})
	defer rdb.Close()
	if err := rdb.Set(context.Background(), e.cfg.RedisPrefix+"stock:MN-270", 2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	items := []orders.OrderItem{{SKU: "MS-220", Qty: 1}}
	cases := []struct {
		name   string
		method string
		path   string
		body   any
		code   int
		errSub string
	}{
		{"not json", "POST", "/orders", "nope", 400, "body is not an order"},
		{"no items", "POST", "/orders", orders.CreateOrder{UserID: 1}, 400, "0 items"},
		{"bad qty", "POST", "/orders", orders.CreateOrder{UserID: 1, Items: []orders.OrderItem{{SKU: "MS-220", Qty: 0}}}, 400, "qty 0"},
		{"twice", "POST", "/orders", orders.CreateOrder{UserID: 1, Items: []orders.OrderItem{{"MS-220", 1}, {"MS-220", 2}}}, 400, "listed twice"},
		{"bad user", "POST", "/orders", orders.CreateOrder{UserID: -3, Items: items}, 400, "user_id -3"},
		{"unknown user", "POST", "/orders", orders.CreateOrder{UserID: 999999, Items: items}, 404, "user 999999 not found"},
		{"unknown sku", "POST", "/orders", orders.CreateOrder{UserID: 1, Items: []orders.OrderItem{{"NOPE-1", 1}}}, 422, `unknown sku "NOPE-1"`},
		{"out of stock", "POST", "/orders", orders.CreateOrder{UserID: 1, Items: []orders.OrderItem{{"MN-270", 3}}}, 409, "2 in stock, 3 ordered"},
		{"unknown coupon", "POST", "/orders", orders.CreateOrder{UserID: 1, Items: items, Coupon: "FREE"}, 422, `unknown coupon "FREE"`},
		{"unknown order", "GET", "/orders/99999999", nil, 404, "not found"},
		{"bad user id", "GET", "/users/x/orders", nil, 400, `user id "x"`},
		{"unknown stock", "GET", "/stock/NOPE", nil, 404, `unknown sku "NOPE"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body any = tc.body
			if s, ok := tc.body.(string); ok {
				body = json.RawMessage(`"` + s + `"`)
			}
			code, b := e.do(tc.method, tc.path, body)
			var er struct{ Error string }
			json.Unmarshal(b, &er)
			if code != tc.code || !strings.Contains(er.Error, tc.errSub) {
				t.Fatalf("%d %s, want %d and an error containing %q", code, b, tc.code, tc.errSub)
			}
		})
	}
	code, b := e.do("GET", "/users/1/orders", nil)
	if uo := decode[orders.UserOrders](t, b); code != 200 || len(uo.Orders) != 0 {
		t.Fatalf("failed orders were stored: %s", b)
	}
}

// TestDownstreamDown checks that a dead downstream is a 502 naming it, not a
// crash or a hang.
func TestDownstreamDown(t *testing.T) {
	e := newEnv(t, orders.VariantNormal)
	cfg := e.cfg
	cfg.PricingURL = "http://127.0.0.1:1"
	srv, err := orders.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("POST", "/orders", strings.NewReader(`{"user_id":1,"items":[{"sku":"KB-101","qty":1}]}`)))
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "pricing") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

func TestChangedVariant(t *testing.T) {
	e := newEnv(t, orders.VariantChanged)
	code, body := e.do("POST", "/orders", orders.CreateOrder{UserID: 3, Items: []orders.OrderItem{{SKU: "HD-330", Qty: 1}}, Coupon: "WELCOME10"})
	if code != http.StatusCreated {
		t.Fatalf("%d %s", code, body)
	}
	o := decode[orders.Order](t, body)
	if o.Status != "pending" {
		t.Errorf("status %q, want pending", o.Status)
	}
	if o.DiscountCents == 0 || len(e.totals) != 1 || e.totals[0] != o.SubtotalCents+o.ShippingCents {
		t.Errorf("fraud checks of totals %v for an order of %+v; want the total before the discount", e.totals, o)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.pricing) != 1 || e.pricing[0] != "/price?channel=web&sku=HD-330" {
		t.Errorf("pricing requests %q", e.pricing)
	}
}

func TestConcurrentOrders(t *testing.T) {
	e := newEnv(t, orders.VariantNormal)
	const clients, each = 16, 8
	var mu sync.Mutex
	ids := map[string]bool{}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				req := orders.CreateOrder{UserID: int64(1 + (c*each+i)%orders.SeedUsers),
					Items: []orders.OrderItem{{SKU: pricing.SKUs()[i%len(pricing.SKUs())], Qty: 1 + i%3}}}
				b, _ := json.Marshal(req)
				resp, err := e.http.Client().Post(e.http.URL+"/orders", "application/json", bytes.NewReader(b))
				if err != nil {
					t.Error(err)
					return
				}
				var o orders.Order
				err = json.NewDecoder(resp.Body).Decode(&o)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusCreated {
					t.Errorf("status %d, %v", resp.StatusCode, err)
					return
				}
				mu.Lock()
				if ids[o.ID] {
					t.Errorf("order id %s given twice", o.ID)
				}
				ids[o.ID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(ids) != clients*each {
		t.Fatalf("%d orders, want %d", len(ids), clients*each)
	}
}

func TestConfig(t *testing.T) {
	cases := []struct {
		name   string
		cfg    orders.Config
		errSub string
	}{
		{"empty", orders.Config{}, "MySQL DSN is empty"},
		{"bad dsn", orders.Config{MySQLDSN: "nope", RedisAddr: "x:1", PricingURL: "http://x"}, `MySQL DSN "nope"`},
		{"bad url", orders.Config{MySQLDSN: "u@tcp(127.0.0.1:1)/d", RedisAddr: "x:1", PricingURL: "ftp://x"}, `pricing URL "ftp://x"`},
		{"bad fraud address", orders.Config{MySQLDSN: "u@tcp(127.0.0.1:1)/d", RedisAddr: "x:1", PricingURL: "http://x", FraudAddr: "fraud"}, `fraud service address "fraud"`},
		{"bad variant", orders.Config{MySQLDSN: "u@tcp(127.0.0.1:1)/d", RedisAddr: "x:1", PricingURL: "http://x", Variant: "v2"}, `variant "v2"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := orders.NewServer(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.errSub) {
				t.Fatalf("error %v, want one containing %q", err, tc.errSub)
			}
		})
	}
	srv, err := orders.NewServer(orders.Config{MySQLDSN: "u@tcp(127.0.0.1:1)/d", RedisAddr: "127.0.0.1:1", PricingURL: "http://127.0.0.1:1/"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if c := srv.Config(); c.RedisPrefix != "orders:" || c.PricingURL != "http://127.0.0.1:1" || c.Timeout != 5*time.Second {
		t.Errorf("defaults %+v", c)
	}
}

func TestConfigFromEnvTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "30s": 30 * time.Second, "1m30s": 90 * time.Second, "soon": 0, "-1s": 0} {
		t.Setenv(orders.EnvTimeout, v)
		if got := orders.ConfigFromEnv().Timeout; got != want {
			t.Errorf("%s=%q: Timeout %v, want %v", orders.EnvTimeout, v, got, want)
		}
	}
}
