package mockserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/mockserver/mocktest"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/trace"
)

// baffledSession is a recording whose one call asks a pricing service,
// dialled by name, for sku's price.
func baffledSession(id, sku string) *recording.Session {
	req := "GET /price?sku=" + sku + " HTTP/1.1\r\nHost: pricing.prod:8081\r\nUser-Agent: t\r\n\r\n"
	body := `{"sku":"` + sku + `","cents":` + fmt.Sprint(len(sku)*100) + `}`
	resp := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body
	return &recording.Session{ID: id, At: time.Unix(1, 0).UTC(), Inbound: recording.Inbound{Proto: "http"},
		Calls: []recording.Call{{Proto: "http", Dst: "10.0.0.9:8081", Host: "pricing.prod:8081", Request: []byte(req), Response: []byte(resp)}}}
}

// askBaffled sends the recorded request to the mock under trace tid, for
// destination dst.
func askBaffled(mock, tid, dst, sku string) (string, error) {
	d := &mocktest.Dialer{Mock: mock, TID: tid, Dst: dst}
	hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	req, _ := http.NewRequest("GET", "http://pricing.prod:8081/price?sku="+sku, nil)
	req.Header.Set("User-Agent", "t")
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), err
}

// TestDerivedAliases: a load test sends each recording under fresh
// derived aliases (REC._SUFFIX) with no admin call; each gets a trace state
// of its own, so the recording's one call answers every one of them. The
// recordings come from a store looked up lazily (the shared store of
// several replicas), each fetched once. Calls reach the recorded
// destination under the name the service dialled as well as its address.
func TestDerivedAliases(t *testing.T) {
	sessions := map[string]*recording.Session{"rec-a": baffledSession("rec-a", "apple"), "rec-b": baffledSession("rec-b", "banana")}
	var lookups sync.Map
	var fetched atomic.Int64
	srv := mocktest.NewServer(t, mockserver.Config{Lookup: func(ctx context.Context, id string) (*recording.Session, error) {
		n, _ := lookups.LoadOrStore(id, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if s := sessions[id]; s != nil {
			fetched.Add(1)
			return s, nil
		}
		return nil, nil
	}})
	const sends = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*sends)
	for i := range sends {
		for _, c := range []struct{ rec, sku, dst string }{{"rec-a", "apple", "pricing.prod:8081"}, {"rec-b", "banana", "10.0.0.9:8081"}} {
			wg.Go(func() {
				tid, ok := trace.Alias(c.rec, fmt.Sprintf("t%d", i))
				if !ok {
					errs <- fmt.Errorf("no alias of %s", c.rec)
					return
				}
				got, err := askBaffled(srv.Addr(), tid, c.dst, c.sku)
				want := fmt.Sprintf(`{"sku":"%s","cents":%d}`, c.sku, len(c.sku)*100)
				if err != nil || got != want {
					errs <- fmt.Errorf("%s: got %q (%v), want %q", tid, got, err, want)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.EqualValues(t, 2, fetched.Load(), "each recording is fetched from the store once")
	require.Equal(t, 2*sends, srv.Traces())
	r := report(t, srv, "rec-a._t3")
	require.Equal(t, "rec-a", r.Recording)
	require.Len(t, r.Calls, 1)
	require.Empty(t, r.Unused)

	var a mockserver.AnswerTimes
	getJSON(t, srv.AdminURL()+"/answers", &a)
	require.EqualValues(t, 2*sends, a.Answers)
	require.Positive(t, a.P50Us)
	require.GreaterOrEqual(t, a.P99Us, a.P50Us)
	require.GreaterOrEqual(t, a.MaxUs, a.P99Us)
	h, err := mockserver.DecodeAnswers(a.Hist)
	require.NoError(t, err)
	require.EqualValues(t, 2*sends, h.TotalCount())

	// An id that is not a derived alias, and one whose recording is not
	// there, get no recording.
	_, err = askBaffled(srv.Addr(), "rec-c._t1", "pricing.prod:8081", "cherry")
	require.ErrorContains(t, err, "status 5")
}
