package http1_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/retrace-dev/retrace/trace"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/wiretest"
)

var samples = []wiretest.Sample{{
	Name: "keep-alive",
	Exchanges: []wiretest.Exchange{
		{Request: []byte("GET /items/7?x=1 HTTP/1.1\r\nHost: shop\r\n\r\n"),
			Response: []byte("HTTP/1.1 200 OK\r\nContent-Length: 9\r\nContent-Type: application/json\r\n\r\n{\"id\": 7}")},
		{Request: []byte("POST /orders HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"qty\": 3}\n"),
			Response: []byte("HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"ok\r\n5\r\n\": 1}\r\n0\r\n\r\n")},
		{Request: []byte("HEAD /items/7 HTTP/1.1\r\nHost: shop\r\n\r\n"),
			Response: []byte("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n")},
		{Request: []byte("PUT /items/7 HTTP/1.1\r\nHost: shop\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
			Response: []byte("HTTP/1.1 204 No Content\r\n\r\n")},
	},
}}

func TestConformance(t *testing.T) { wiretest.Conform(t, http1.Protocol, samples...) }

func FuzzFramers(f *testing.F) { wiretest.FuzzFramers(f, http1.Protocol, samples...) }

// httpClient is a wiretest.Client over net/http's pool.
type httpClient struct {
	c    *http.Client
	base string
}

func (h httpClient) Call(ctx context.Context, i, n int) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/items/%d/%d", h.base, i, n), nil)
	resp, err := h.c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.Status + " " + string(b), err
}

func (h httpClient) Close() { h.c.CloseIdleConnections() }

func TestRecordReplay(t *testing.T) {
	ds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s %s", r.URL.Path, trace.NewID()[:8])
	}))
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: http1.Name, Dst: ds.Listener.Addr().String(), Stop: ds.Close,
		NewClient: func(dst string) wiretest.Client {
			return httpClient{c: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}, base: "http://" + dst}
		}})
}
