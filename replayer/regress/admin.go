package regress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/mockserver"
)

// admin talks to a mock server's admin API (mockserver/api.go).
type admin struct {
	base  string
	token string // "" or the admin token, sent as a bearer token
	hc    *http.Client
}

func newAdmin(base, token string, conns int, timeout time.Duration) (*admin, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("mock admin URL %q: want http://HOST:PORT", base)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: 0, IdleConnTimeout: 30 * time.Second}
	return &admin{base: strings.TrimSuffix(base, "/"), token: token, hc: &http.Client{Transport: tr, Timeout: timeout}}, nil
}

func (a *admin) close() { a.hc.CloseIdleConnections() }

func (a *admin) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("mock admin %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("mock admin %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(msg))
	}
	if out == nil {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("mock admin %s %s: decode: %w", method, path, err)
	}
	return nil
}

// register makes trace another name of the recording rec.
func (a *admin) register(ctx context.Context, trace, rec string) error {
	return a.do(ctx, http.MethodPost, "/traces", mockserver.Alias{Trace: trace, Recording: rec}, nil)
}

// report returns what the mock server saw of trace.
func (a *admin) report(ctx context.Context, trace string) (*mockserver.TraceReport, error) {
	var r mockserver.TraceReport
	if err := a.do(ctx, http.MethodGet, "/traces/"+url.PathEscape(trace), nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// forget drops what the mock server keeps of trace.
func (a *admin) forget(ctx context.Context, trace string) error {
	return a.do(ctx, http.MethodDelete, "/traces/"+url.PathEscape(trace), nil, nil)
}

// Destinations returns which recorded destination the mock server at
// adminURL answered each live destination from, and why (GET
// /destinations, DESIGN.md section 10).
func Destinations(ctx context.Context, adminURL, token string, timeout time.Duration) ([]mockserver.DestDecision, error) {
	a, err := newAdmin(adminURL, token, 1, timeout)
	if err != nil {
		return nil, err
	}
	defer a.close()
	var out []mockserver.DestDecision
	if err := a.do(ctx, http.MethodGet, "/destinations", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
