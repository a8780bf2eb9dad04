package replaytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// Downstream sends one raw request of the service under test, made while
// serving trace, and returns the raw response: the place where the agent
// would redirect a connection to the mock server.
type Downstream func(trace string, req []byte) ([]byte, error)

// PricesDst is the destination the shop's price lookups are recorded with.
const PricesDst = "prices.internal:8080"

// ShopVersion selects the build of the test shop.
type ShopVersion int

// Builds of the shop. V2 changes one response field for sku "b" (the
// order total) and one downstream request for sku "c" (a new query
// parameter); everything else behaves like V1.
const (
	ShopV1 ShopVersion = 1
	ShopV2 ShopVersion = 2
)

// NewShop starts the test service: POST /orders with {"sku","qty"} looks
// the price up downstream (GET /price?sku=… on PricesDst) and answers
// {"order":{"sku","qty","total"},"ts":<now>}; GET /health answers
// {"ok":true,"ts":<now>}. ts is noise, and so is the X-Request-Id header of
// the price lookup. It reads the trace id the way the
// agent would bind it, from the Retrace-Trace-Id header.
func NewShop(t testing.TB, v ShopVersion, down Downstream) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":true,"ts":%q}`, time.Now().Format(time.RFC3339Nano))
	})
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			SKU string `json:"sku"`
			Qty int    `json:"qty"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "bad order: "+err.Error(), http.StatusBadRequest)
			return
		}
		q := "sku=" + in.SKU
		if v == ShopV2 && in.SKU == "c" {
			q += "&currency=EUR"
		}
		// X-Request-Id is downstream noise: new on every request.
		req := fmt.Sprintf("GET /price?%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: shop\r\nX-Request-Id: %s\r\n\r\n", q, PricesDst, trace.NewID())
		raw, err := down(r.Header.Get("Retrace-Trace-Id"), []byte(req))
		if err != nil {
			http.Error(w, "prices: "+err.Error(), http.StatusBadGateway)
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			http.Error(w, "prices: "+err.Error(), http.StatusBadGateway)
			return
		}
		var p struct {
			Price float64 `json:"price"`
		}
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil {
			http.Error(w, "prices: "+err.Error(), http.StatusBadGateway)
			return
		}
		total := p.Price * float64(in.Qty)
		if v == ShopV2 && in.SKU == "b" {
			total += 1
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]any{
			"order": map[string]any{"sku": in.SKU, "qty": in.Qty, "total": total},
			"ts":    time.Now().Format(time.RFC3339Nano),
		})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// NewPrices starts the real price service the shop records against:
// GET /price?sku=X answers {"sku":X,"price":P} with P derived from X.
func NewPrices(t testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sku := r.URL.Query().Get("sku")
		price := 1.5
		for _, c := range sku {
			price += float64(c % 7)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"sku":%q,"price":%s}`, sku, strconv.FormatFloat(price, 'f', -1, 64))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// roundTrip writes req on conn and returns the raw bytes of one response.
func roundTrip(conn net.Conn, write []byte) ([]byte, error) {
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(write); err != nil {
		return nil, err
	}
	var raw bytes.Buffer
	resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(conn, &raw)), nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return raw.Bytes(), err
}

// Direct is a Downstream that sends each request to the real service at
// addr on a new connection.
func Direct(addr string) Downstream {
	return func(_ string, req []byte) ([]byte, error) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return roundTrip(conn, req)
	}
}

// Framed is a Downstream that does what the agent does in replay mode:
// each request goes to the mock server at mockAddr on a new connection
// that starts with the preamble frame naming dst, and the request is sent
// as one frame carrying the trace id (DESIGN.md 3.3).
func Framed(mockAddr, dst string) Downstream {
	return func(tid string, req []byte) ([]byte, error) {
		conn, err := net.Dial("tcp", mockAddr)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		if !trace.ValidID(tid) {
			tid = ""
		}
		b := trace.AppendFrameHeader(nil, tid, dst, 0)
		b = trace.AppendFrame(b, tid, dst, req)
		return roundTrip(conn, b)
	}
}

// InMock is a Downstream answered by an in-process Mock.
func InMock(m *Mock, dst string) Downstream {
	return func(tid string, req []byte) ([]byte, error) {
		resp, ok := m.Call(tid, "http", dst, req)
		if !ok {
			return []byte("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 12\r\n\r\nmissing mock"), nil
		}
		return resp, nil
	}
}

// Recorder records sessions of a service whose downstream goes through
// Downstream: it is the test's stand-in for record mode. Requests must be
// sent one at a time through Send.
type Recorder struct {
	mu       sync.Mutex
	calls    []recording.Call
	sessions []*recording.Session
	down     Downstream
	start    time.Time
}

// NewRecorder wraps the real downstream down.
func NewRecorder(down Downstream) *Recorder { return &Recorder{down: down} }

// Downstream is what the service under test calls while recording.
func (r *Recorder) Downstream(dst string) Downstream {
	return func(tid string, req []byte) ([]byte, error) {
		start := time.Now()
		resp, err := r.down(tid, req)
		r.mu.Lock()
		r.calls = append(r.calls, recording.Call{Seq: len(r.calls), Proto: "http", Dst: dst,
			Request: req, Response: resp, StartNs: int64(start.Sub(r.start)), DurNs: int64(time.Since(start))})
		r.mu.Unlock()
		return resp, err
	}
}

// Send sends the raw request to the service at addr and records the
// session with id.
func (r *Recorder) Send(t testing.TB, addr, id string, req []byte) *recording.Session {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r.mu.Lock()
	r.calls, r.start = nil, time.Now()
	r.mu.Unlock()
	at := time.Now()
	resp, err := roundTrip(conn, req)
	if err != nil {
		t.Fatalf("recording %s: %v", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &recording.Session{V: recording.SchemaVersion, ID: id, App: "shop", At: at,
		Inbound: recording.Inbound{Proto: "http", Local: addr, Request: req, Response: resp, DurNs: int64(time.Since(at))},
		Calls:   r.calls}
	r.sessions = append(r.sessions, s)
	return s
}

// Sessions returns everything recorded so far.
func (r *Recorder) Sessions() []*recording.Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*recording.Session(nil), r.sessions...)
}

// OrderRequest is a raw POST /orders request for sku and qty.
func OrderRequest(sku string, qty int) []byte {
	body := fmt.Sprintf(`{"sku":%q,"qty":%d}`, sku, qty)
	return HTTPRequest("POST", "/orders", "shop.internal", body, "Content-Type: application/json")
}

// Addr returns host:port of a test server URL.
func Addr(url string) string { return strings.TrimPrefix(url, "http://") }
