package capture_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/hook"
	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/recording"
)

// pipelinedReq is a request of the fan-out service as a pipelining client
// sends it (with a Retrace-* header the agent must strip), and as the
// session must hold it.
func pipelinedReq(id string) (send, recorded string) {
	line := "GET /work?id=" + id + " HTTP/1.1\r\nHost: sut\r\n"
	return line + "Retrace-Replay-Time: 1700000000000000000\r\nAccept: */*\r\n\r\n", line + "Accept: */*\r\n\r\n"
}

// TestRecordPipelined: a client writes three requests of the fan-out
// service (Redis, MariaDB, an HTTP downstream, every call naming the
// request's id) on one connection before reading any answer — all in one
// write, or the second head cut in two, its rest sent after the first
// answer or at once. Each request is one session holding exactly its own
// request, its own response and its own calls.
func TestRecordPipelined(t *testing.T) {
	w := startWorld(t, sampler(t, 1))
	before := hook.ReadStats()
	scenarios := []struct {
		name string
		send func(t *testing.T, rc *agenttest.RawClient, reqs []string) (read int)
	}{
		{"one write", func(t *testing.T, rc *agenttest.RawClient, reqs []string) int {
			require.NoError(t, rc.WriteRaw([]byte(strings.Join(reqs, ""))))
			return 0
		}},
		{"second head split, rest after the first response", func(t *testing.T, rc *agenttest.RawClient, reqs []string) int {
			cut := len(reqs[1]) / 2
			require.NoError(t, rc.WriteRaw([]byte(reqs[0]+reqs[1][:cut])))
			code, _, err := rc.ReadResponse()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code)
			require.NoError(t, rc.WriteRaw([]byte(reqs[1][cut:]+reqs[2])))
			return 1
		}},
		{"second head split, rest at once", func(t *testing.T, rc *agenttest.RawClient, reqs []string) int {
			cut := strings.Index(reqs[1], "Retrace-") + 3
			require.NoError(t, rc.WriteRaw([]byte(reqs[0]+reqs[1][:cut])))
			time.Sleep(2 * time.Millisecond)
			require.NoError(t, rc.WriteRaw([]byte(reqs[1][cut:]+reqs[2])))
			return 0
		}},
	}
	ids := map[string]bool{}
	recorded := map[string]string{}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			rc, err := agenttest.DialRaw(w.addr)
			require.NoError(t, err)
			defer rc.Close()
			var reqs []string
			for range 3 {
				id := newReqID()
				send, rec := pipelinedReq(id)
				ids[id], recorded[id] = true, rec
				reqs = append(reqs, send)
			}
			for range 3 - sc.send(t, rc, reqs) {
				code, body, err := rc.ReadResponse()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, code, "%s", body)
			}
		})
	}
	settle(t, w.rec)

	sessions := checkSessions(t, w.store, w.addr, ids)
	require.Len(t, sessions, len(ids), "one session per request")
	for id, s := range sessions {
		assert.Equal(t, recorded[id], string(s.Inbound.Request), "session of %s: its request, Retrace-* stripped", id)
		checkOwnResponse(t, id, s)
	}
	st := w.rec.Stats()
	assert.Zero(t, st.Incomplete)
	assert.Zero(t, st.Dropped)
	// one write: two requests waited; split heads: the third one at least
	assert.GreaterOrEqual(t, hook.ReadStats().Pipelined-before.Pipelined, int64(4))
}

// checkOwnResponse asserts that the session's response is one whole HTTP
// response, the service's answer to request id, and nothing more.
func checkOwnResponse(t *testing.T, id string, s *recording.Session) {
	t.Helper()
	raw := bytes.NewReader(s.Inbound.Response)
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err, "session of %s: %q", id, s.Inbound.Response)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	want := fmt.Sprintf(`{"Redis":%q,"SQL":%q,"HTTP":%q}`, id, "v-"+id, "echo-"+id)
	assert.Equal(t, want, strings.TrimSpace(string(body)), "session of %s", id)
	assert.Zero(t, br.Buffered()+raw.Len(), "session of %s: bytes after its response: %q", id, s.Inbound.Response)
}
