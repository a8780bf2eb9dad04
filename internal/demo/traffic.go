package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/retrace-dev/retrace/examples/orders"
	"github.com/retrace-dev/retrace/examples/pricing"
)

// Traffic generates realistic traffic for the orders example: concurrent
// clients that place orders (some with coupons, a few invalid), look their
// orders up, list a user's orders and check stock.
type Traffic struct {
	// BaseURL of the orders service, e.g. "http://127.0.0.1:8080". Required.
	BaseURL string
	// Requests in total; zero means 300.
	Requests int
	// Clients sending at once; zero means 16.
	Clients int
	// Duration spreads the requests evenly over this long (a client
	// that is busy sends late, never concurrently with itself); zero sends
	// them as fast as the clients are answered.
	Duration time.Duration
	// Seed makes the request mix reproducible; zero is a valid seed.
	Seed uint64
	// Client sends the requests; nil means a keep-alive client of its own.
	Client *http.Client
}

// TrafficStats counts what a Traffic run sent and got, by API.
type TrafficStats struct {
	Requests int
	Errors   int // transport errors (no response)
	ByAPI    map[string]int
	ByStatus map[int]int
	Elapsed  time.Duration
}

// APIs returns the API names of s in a stable order.
func (s *TrafficStats) APIs() []string {
	apis := make([]string, 0, len(s.ByAPI))
	for a := range s.ByAPI {
		apis = append(apis, a)
	}
	sort.Strings(apis)
	return apis
}

// API names, as recording.APIName groups them (replay and load reports use the same).
const (
	APICreateOrder = "POST /orders"
	APIGetOrder    = "GET /orders/{id}"
	APIUserOrders  = "GET /users/{id}/orders"
	APIStock       = "GET /stock/{id}"
)

// Run sends the traffic and waits for every answer. It returns an error only
// when ctx ends first or the configuration is bad; failed requests are
// counted in the stats.
func (tr Traffic) Run(ctx context.Context) (*TrafficStats, error) {
	if tr.BaseURL == "" {
		return nil, fmt.Errorf("demo: traffic: empty base URL")
	}
	if tr.Requests == 0 {
		tr.Requests = 300
	}
	if tr.Clients == 0 {
		tr.Clients = 16
	}
	c := tr.Client
	if c == nil {
		t := &http.Transport{MaxIdleConnsPerHost: tr.Clients, DisableCompression: true}
		defer t.CloseIdleConnections()
		c = &http.Client{Transport: t, Timeout: 30 * time.Second}
	}
	stats := &TrafficStats{ByAPI: map[string]int{}, ByStatus: map[int]int{}}
	var mu sync.Mutex
	work := make(chan int)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range tr.Clients {
		cl := &trafficClient{c: c, base: tr.BaseURL, rng: rand.New(rand.NewPCG(tr.Seed, uint64(i)))}
		wg.Go(func() {
			for range work {
				api, code, err := cl.next(ctx)
				mu.Lock()
				stats.Requests++
				stats.ByAPI[api]++
				if err != nil {
					stats.Errors++
				} else {
					stats.ByStatus[code]++
				}
				mu.Unlock()
			}
		})
	}
	var err error
	timer := time.NewTimer(0)
	defer timer.Stop()
feed:
	for i := 0; i < tr.Requests; i++ {
		if tr.Duration > 0 {
			timer.Reset(time.Until(start.Add(tr.Duration * time.Duration(i) / time.Duration(tr.Requests))))
			select {
			case <-timer.C:
			case <-ctx.Done():
				err = ctx.Err()
				break feed
			}
		}
		select {
		case work <- i:
		case <-ctx.Done():
			err = ctx.Err()
			break feed
		}
	}
	close(work)
	wg.Wait()
	stats.Elapsed = time.Since(start)
	return stats, err
}

// trafficClient is one simulated client; it remembers the orders it placed.
type trafficClient struct {
	c      *http.Client
	base   string
	rng    *rand.Rand
	placed []string
}

func (cl *trafficClient) next(ctx context.Context) (api string, code int, err error) {
	r := cl.rng.IntN(100)
	switch {
	case r < 20 && len(cl.placed) > 0:
		id := cl.placed[cl.rng.IntN(len(cl.placed))]
		code, _, err = cl.send(ctx, http.MethodGet, "/orders/"+id, nil)
		return APIGetOrder, code, err
	case r < 32:
		uid := 1 + cl.rng.IntN(orders.SeedUsers)
		code, _, err = cl.send(ctx, http.MethodGet, "/users/"+strconv.Itoa(uid)+"/orders", nil)
		return APIUserOrders, code, err
	case r < 42:
		skus := pricing.SKUs()
		code, _, err = cl.send(ctx, http.MethodGet, "/stock/"+skus[cl.rng.IntN(len(skus))], nil)
		return APIStock, code, err
	}
	body := cl.order()
	code, resp, err := cl.send(ctx, http.MethodPost, "/orders", body)
	if err == nil && code == http.StatusCreated {
		var o struct {
			ID string `json:"order_id"`
		}
		if json.Unmarshal(resp, &o) == nil && o.ID != "" {
			cl.placed = append(cl.placed, o.ID)
		}
	}
	return APICreateOrder, code, err
}

// order returns a random order: 1 to 4 distinct SKUs, a coupon one time in
// four, and one time in fifty an unknown coupon or user.
func (cl *trafficClient) order() []byte {
	skus := pricing.SKUs()
	cl.rng.Shuffle(len(skus), func(i, j int) { skus[i], skus[j] = skus[j], skus[i] })
	req := orders.CreateOrder{UserID: int64(1 + cl.rng.IntN(orders.SeedUsers))}
	for _, s := range skus[:1+cl.rng.IntN(4)] {
		req.Items = append(req.Items, orders.OrderItem{SKU: s, Qty: 1 + cl.rng.IntN(3)})
	}
	switch r := cl.rng.IntN(100); {
	case r < 25:
		codes := []string{"WELCOME10", "SPRING15", "VIP25"}
		req.Coupon = codes[cl.rng.IntN(len(codes))]
	case r == 25:
		req.Coupon = "EXPIRED5"
	case r == 26:
		req.UserID = orders.SeedUsers + 1 + int64(cl.rng.IntN(100))
	}
	b, _ := json.Marshal(req)
	return b
}

func (cl *trafficClient) send(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, cl.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "retrace-demo-client/1")
	resp, err := cl.c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
