package recording

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultStore is a store that can be killed (every call fails at once),
// frozen (every call blocks until its context ends) or slowed (every call
// takes a while), and brought back; it keeps what it stores.
type faultStore struct {
	memWriter
	mu    sync.Mutex
	mode  string // "", "killed", "frozen"
	delay time.Duration
	calls int
}

var errKilled = errors.New("connection refused")

func (f *faultStore) set(mode string) { f.mu.Lock(); f.mode = mode; f.mu.Unlock() }

func (f *faultStore) fault(ctx context.Context) error {
	f.mu.Lock()
	mode, delay := f.mode, f.delay
	f.calls++
	f.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	switch mode {
	case "killed":
		return errKilled
	case "frozen":
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *faultStore) Write(ctx context.Context, ss []*Session) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.memWriter.Write(ctx, ss)
}

func (f *faultStore) Flush(ctx context.Context) error {
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.memWriter.Flush(ctx)
}

// lockedBuffer is a log destination for slog, safe for the writer's
// goroutine and the test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

func faultPipeline(t *testing.T, st *faultStore, buffer int64, logs *lockedBuffer) *Pipeline {
	t.Helper()
	p, err := NewPipeline(PipelineConfig{Store: st, Sampler: all(t), BufferBytes: buffer,
		RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, WriteTimeout: 20 * time.Millisecond,
		ReportInterval: 50 * time.Millisecond,
		// the default level of the agent (RETRACE_LOG unset) is error
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))})
	require.NoError(t, err)
	return p
}

// A store that is killed, frozen or slow loses nothing that fits the
// buffer: the backlog is written when it is back; what did not fit is
// dropped, every drop counted and logged (the first at once).
func TestPipelineStoreOutages(t *testing.T) {
	one := Cost(sampleSession("x0000"))
	for _, mode := range []string{"killed", "frozen", "slow"} {
		t.Run(mode, func(t *testing.T) {
			st := &faultStore{}
			var logs lockedBuffer
			const fits = 40
			p := faultPipeline(t, st, fits*one, &logs)
			if mode == "slow" {
				st.delay = 5 * time.Millisecond
			} else {
				st.set(mode)
			}
			const offered = 100
			accepted := 0
			for i := range offered {
				if p.Submit(sampleSession(fmt.Sprintf("x%04d", i))) {
					accepted++
				}
			}
			if mode != "slow" {
				require.Eventually(t, func() bool { return p.Stats().WriteErrors >= 2 }, 10*time.Second, time.Millisecond)
				assert.NotEmpty(t, logs.lines("writing sessions to the store failed"), "the failure is logged")
			}
			assert.GreaterOrEqual(t, accepted, fits-1, "what fits the buffer is taken")
			assert.LessOrEqual(t, p.Stats().Buffered, fits*one, "the buffer holds its bound")
			st.set("")
			require.NoError(t, p.Close(context.Background()))
			s := p.Stats()
			assert.EqualValues(t, accepted, s.Recorded, "every accepted session is stored")
			assert.Len(t, st.ids(), accepted)
			assert.EqualValues(t, offered-accepted, s.Dropped, "every other one counted")
			assert.EqualValues(t, offered-accepted, s.BufferFull)
			assert.Zero(t, s.Buffered)
			if mode != "slow" {
				drops := logs.lines("sessions dropped")
				require.NotEmpty(t, drops, "drops are logged at the default level")
				assert.Contains(t, drops[0], "count=1 ", "the first drop at once")
				assert.Contains(t, drops[len(drops)-1], fmt.Sprintf("total=%d ", offered-accepted), "the last line has them all")
				assert.Less(t, len(drops), offered-accepted, "rate-limited, not a line per drop")
				assert.NotEmpty(t, logs.lines("store works again"))
			}
		})
	}
}

// The buffer is bounded in bytes: with a frozen store and 1 MB bodies the
// pipeline holds about BufferBytes, not a queue's worth of sessions.
func TestPipelineBufferIsBytes(t *testing.T) {
	st := &faultStore{}
	st.set("frozen")
	var logs lockedBuffer
	p := faultPipeline(t, st, 4<<20, &logs)
	body := bytes.Repeat([]byte("x"), 1<<20)
	accepted := 0
	for i := range 50 {
		s := sampleSession(fmt.Sprint(i))
		s.Inbound.Response = body
		if p.Submit(s) {
			accepted++
		}
		assert.LessOrEqual(t, p.Stats().Buffered, int64(4<<20))
	}
	assert.Equal(t, 3, accepted, "three 1 MB sessions fit 4 MB with their overhead")
	st.set("")
	require.NoError(t, p.Close(context.Background()))
	assert.EqualValues(t, 3, p.Stats().Recorded)
	assert.EqualValues(t, 47, p.Stats().Dropped)
}

// A session the store refuses for good is dropped and counted, and does not
// hold back the others of its batch.
func TestPipelineRejectedSession(t *testing.T) {
	st := &rejectStore{bad: "b"}
	p, err := NewPipeline(PipelineConfig{Store: st, Sampler: all(t), BatchSize: 8})
	require.NoError(t, err)
	for _, id := range []string{"a", "b", "c"} {
		p.Submit(sampleSession(id))
	}
	require.NoError(t, p.Close(context.Background()))
	assert.Equal(t, []string{"a", "c"}, st.ids())
	assert.EqualValues(t, 1, p.Stats().Rejected)
	assert.EqualValues(t, 1, p.Stats().Dropped)
	assert.EqualValues(t, 2, p.Stats().Recorded)
}

type rejectStore struct {
	memWriter
	bad string
}

func (r *rejectStore) Write(ctx context.Context, ss []*Session) error {
	for _, s := range ss {
		if s.ID == r.bad {
			return fmt.Errorf("id %s: %w", s.ID, ErrRejected)
		}
	}
	return r.memWriter.Write(ctx, ss)
}
