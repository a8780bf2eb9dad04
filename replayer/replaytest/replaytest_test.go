package replaytest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/retrace-dev/retrace/mockserver"
	"github.com/retrace-dev/retrace/recording"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMockAnswersInRecordedOrderAndReports(t *testing.T) {
	s := Session("rec-1", time.Now(), HTTPRequest("GET", "/", "h", ""), HTTPResponse(200, "ok"),
		recording.Call{Proto: "http", Dst: "a:1", Request: []byte("first"), Response: []byte("r1")},
		recording.Call{Proto: "http", Dst: "a:1", Request: []byte("second"), Response: []byte("r2")},
		recording.Call{Proto: "http", Dst: "b:1", Request: []byte("other"), Response: []byte("r3")})
	m := NewMock(t, s)
	alias, _ := json.Marshal(mockserver.Alias{Trace: "t1", Recording: "rec-1"})
	resp, err := http.Post(m.URL+"/traces", "application/json", bytes.NewReader(alias))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("register: %v %v", resp, err)
	}
	resp.Body.Close()
	if r, ok := m.Call("t1", "http", "a:1", []byte("x")); !ok || string(r) != "r1" {
		t.Errorf("first call answered %q %v", r, ok)
	}
	if r, ok := m.Call("t1", "http", "a:1", []byte("y")); !ok || string(r) != "r2" {
		t.Errorf("second call answered %q %v", r, ok)
	}
	if _, ok := m.Call("t1", "http", "a:1", []byte("z")); ok {
		t.Error("a third call was answered")
	}
	resp, err = http.Get(m.URL + "/traces/t1")
	if err != nil {
		t.Fatal(err)
	}
	var rep mockserver.TraceReport
	json.NewDecoder(resp.Body).Decode(&rep)
	resp.Body.Close()
	if rep.Recording != "rec-1" || len(rep.Calls) != 3 || rep.Calls[2].Matched != -1 || len(rep.Unused) != 1 || rep.Unused[0].Dst != "b:1" {
		t.Errorf("report %+v", rep)
	}
	req, _ := http.NewRequest(http.MethodDelete, m.URL+"/traces/t1", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if m.Traces() != 0 {
		t.Errorf("%d traces left after DELETE", m.Traces())
	}
	alias, _ = json.Marshal(mockserver.Alias{Trace: "t2", Recording: "nope"})
	resp, err = http.Post(m.URL+"/traces", "application/json", bytes.NewReader(alias))
	if err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("alias of an unknown recording: %v %v", resp, err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
}
