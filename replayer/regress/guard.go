package regress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/retrace-dev/retrace/recording"
)

// ErrUnreachable marks a target or mock admin API that did not answer
// before the replay started (exit status 2 in the CLI).
var ErrUnreachable = errors.New("not reachable")

// ErrNotReplaying stops a replay whose target makes its downstream calls
// somewhere other than the mock server: the sessions it has replayed had
// recorded calls, and the mock server saw none of them.
var ErrNotReplaying = errors.New("the target is not running in replay mode; its downstream calls went to real services " +
	"(start it with RETRACE_MODE=replay and RETRACE_MOCK_ADDR naming the mock server, or pass --no-mode-check when every call is a pass-through)")

// modeCheckSessions is how many replayed sessions with recorded calls the
// mock server must have seen nothing of before a replay stops with
// ErrNotReplaying. One session with no calls can be a build that no longer
// makes them; several in a row, at the start, are a target not in replay
// mode.
const modeCheckSessions = 4

// preflightTimeout bounds each check of preflight.
const preflightTimeout = 5 * time.Second

// preflight checks that every side's target accepts connections and that
// its mock admin API answers, so a mistyped address fails at once with a
// message naming it rather than as one error per session.
func (r *runner) preflight(ctx context.Context) error {
	for _, sd := range []*side{r.candidate, r.baseline} {
		if sd == nil {
			continue
		}
		d := net.Dialer{Timeout: min(preflightTimeout, r.cfg.Timeout)}
		c, err := d.DialContext(ctx, "tcp", sd.target.addr)
		switch {
		case err == nil:
			c.Close()
		case errors.Is(err, syscall.ECONNRESET):
			// something listens and hung up at once: the sessions will
			// say what it does
		default:
			return fmt.Errorf("%w: %s target %s: %v", ErrUnreachable, sd.name, sd.target.url, err)
		}
		if sd.admin == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, min(preflightTimeout, r.cfg.Timeout))
		err = sd.admin.do(cctx, http.MethodGet, "/healthz", nil, nil)
		if err == nil {
			// /healthz needs no token; a report does. A trace no replay
			// uses costs the mock server nothing.
			err = sd.admin.do(cctx, http.MethodGet, "/traces/retrace-preflight", nil, nil)
			if err != nil && strings.Contains(err.Error(), "401") {
				err = fmt.Errorf("%v (give the mock's admin token: --mock-admin-token or RETRACE_MOCK_ADMIN_TOKEN)", err)
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %s mock admin %s: %v", ErrUnreachable, sd.name, sd.admin.base, err)
		}
	}
	return nil
}

// modeCheck watches the first replays of sessions that have recorded
// calls: when the mock server saw no call at all for the first
// modeCheckSessions of them, the target is not in replay mode.
type modeCheck struct {
	mu      sync.Mutex
	silent  int  // eligible replays in a row with no observed call
	settled bool // a replay with calls was seen, or the check tripped
	stop    context.CancelCauseFunc
}

// observe records one replay of s for which the mock server observed
// calls calls.
func (m *modeCheck) observe(s *recording.Session, calls int) {
	if m == nil || !hasRequests(s) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled {
		return
	}
	if calls > 0 {
		m.settled = true
		return
	}
	m.silent++
	if m.silent >= modeCheckSessions {
		m.settled = true
		m.stop(ErrNotReplaying)
	}
}

// hasRequests reports whether s recorded a downstream call that is not
// connection set-up (a pooled connection's set-up may have happened before
// the replay).
func hasRequests(s *recording.Session) bool {
	for i := range s.Calls {
		if !s.Calls[i].Setup {
			return true
		}
	}
	return false
}
