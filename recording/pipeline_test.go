package recording

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memWriter is a Writer that keeps sessions in memory; when gate is set,
// every Write first signals entered and then waits for gate.
type memWriter struct {
	mu       sync.Mutex
	got      []*Session
	flushes  int
	flushedN int // sessions written before the last flush
	closed   bool
	entered  chan struct{}
	gate     chan struct{}
	fail     error
}

func (w *memWriter) Write(ctx context.Context, ss []*Session) error {
	if w.gate != nil {
		w.entered <- struct{}{}
		<-w.gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return w.fail
	}
	w.got = append(w.got, ss...)
	return nil
}

func (w *memWriter) Flush(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushes++
	w.flushedN = len(w.got)
	return nil
}

func (w *memWriter) Close() error { w.mu.Lock(); w.closed = true; w.mu.Unlock(); return nil }

func (w *memWriter) ids() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return ids(w.got)
}

func all(t *testing.T) Sampler {
	s, err := NewSampler(1)
	require.NoError(t, err)
	return s
}

func TestPipelineWritesMasksAndCaps(t *testing.T) {
	w := &memWriter{}
	mask, err := ParseMasker(strings.NewReader("header Authorization\n"), "r")
	require.NoError(t, err)
	p, err := NewPipeline(PipelineConfig{Store: w, Sampler: all(t), Mask: mask, MaxPayload: 40})
	require.NoError(t, err)
	for i := range 5 {
		require.True(t, p.Sample())
		s := sampleSession(fmt.Sprint(i))
		s.Inbound.Request = []byte("GET / HTTP/1.1\r\nAuthorization: secret\r\n\r\n")
		require.True(t, p.Submit(s))
	}
	require.NoError(t, p.Flush(context.Background()))
	assert.Equal(t, []string{"0", "1", "2", "3", "4"}, w.ids())
	got := w.got[0]
	assert.Equal(t, "GET / HTTP/1.1\r\nAuthorization: ***\r\n\r\n", string(got.Inbound.Request), "masked, then under the cap")
	assert.True(t, got.Inbound.ResponseTruncated)
	assert.Len(t, got.Inbound.Response, 40)
	require.NoError(t, p.Close(context.Background()))
	require.NoError(t, p.Close(context.Background()), "Close twice")
	assert.True(t, w.closed)
	assert.Equal(t, Stats{Seen: 5, Sampled: 5, Recorded: 5, Masked: 5, Truncated: 5}, p.Stats())
	assert.False(t, p.Submit(sampleSession("late")), "after Close sessions are dropped")
	assert.EqualValues(t, 1, p.Stats().Dropped)
	assert.EqualValues(t, 1, p.Stats().Abandoned)
}

func TestPipelineQueueFullDropsWithoutBlocking(t *testing.T) {
	w := &memWriter{entered: make(chan struct{}), gate: make(chan struct{})}
	const queue = 8
	p, err := NewPipeline(PipelineConfig{Store: w, Sampler: all(t), QueueSize: queue, BatchSize: 1})
	require.NoError(t, err)
	require.True(t, p.Submit(sampleSession("first")))
	<-w.entered // the writer holds "first" and is blocked in Write
	accepted := 0
	for i := range queue + 10 {
		if p.Submit(sampleSession(fmt.Sprint(i))) {
			accepted++
		}
	}
	// every Submit above returned although the store is blocked
	assert.Equal(t, queue, accepted)
	assert.EqualValues(t, 10, p.Stats().Dropped)

	go func() {
		for range w.entered {
		}
	}()
	close(w.gate)
	require.NoError(t, p.Close(context.Background()))
	close(w.entered)
	st := p.Stats()
	assert.EqualValues(t, 1+queue, st.Recorded)
	assert.EqualValues(t, 10, st.Dropped)
}

func TestPipelineWriteErrorsAreRetried(t *testing.T) {
	w := &memWriter{fail: errors.New("disk full")}
	var log errLog
	p, err := NewPipeline(PipelineConfig{Store: w, Sampler: all(t), ErrorLog: log.add, RetryMin: time.Millisecond})
	require.NoError(t, err)
	p.Submit(sampleSession("a"))
	require.Eventually(t, func() bool { return p.Stats().WriteErrors >= 3 }, 10*time.Second, time.Millisecond)
	assert.ErrorContains(t, p.Flush(context.Background()), "disk full", "Flush says the store fails")
	w.mu.Lock()
	w.fail = nil
	w.mu.Unlock()
	require.NoError(t, p.Close(context.Background()))
	st := p.Stats()
	assert.EqualValues(t, 0, st.Dropped)
	assert.EqualValues(t, 1, st.Recorded, "written once the store works again")
	assert.Zero(t, st.Buffered)
	assert.Equal(t, []string{"a"}, w.ids())
	assert.ErrorContains(t, log.all()[0], "disk full")
}

func TestPipelineFlushesPeriodically(t *testing.T) {
	w := &memWriter{}
	p, err := NewPipeline(PipelineConfig{Store: w, Sampler: all(t), FlushInterval: time.Millisecond})
	require.NoError(t, err)
	defer p.Close(context.Background())
	p.Submit(sampleSession("a"))
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.flushes > 0 && len(w.got) == 1
	}, 10*time.Second, time.Millisecond)
}

// TestPipelineWakesFromIdle: a writer that went idle (nothing queued,
// nothing to flush, no timer running) still writes and flushes the next
// session promptly.
func TestPipelineWakesFromIdle(t *testing.T) {
	w := &memWriter{}
	p, err := NewPipeline(PipelineConfig{Store: w, Sampler: all(t), FlushInterval: 5 * time.Millisecond})
	require.NoError(t, err)
	defer p.Close(context.Background())
	flushedAll := func(n int) func() bool {
		return func() bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.got) == n && w.flushes > 0 && w.flushedN == n
		}
	}
	for i := range 3 {
		p.Submit(sampleSession(fmt.Sprint(i)))
		require.Eventually(t, flushedAll(i+1), 10*time.Second, time.Millisecond)
		time.Sleep(30 * time.Millisecond) // idle again
	}
}

func TestPipelineCloseGivesUp(t *testing.T) {
	w := &memWriter{entered: make(chan struct{}, 100), gate: make(chan struct{})}
	p, err := NewPipeline(PipelineConfig{Store: w, Sampler: all(t), BatchSize: 1})
	require.NoError(t, err)
	p.Submit(sampleSession("a"))
	<-w.entered
	p.Submit(sampleSession("b"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, p.Close(ctx), context.Canceled)
	close(w.gate) // the blocked Write returns; the writer drops "b" and ends
	<-p.done
	assert.EqualValues(t, 1, p.Stats().Dropped)
	assert.EqualValues(t, 1, p.Stats().Abandoned)
	assert.EqualValues(t, 1, p.Stats().Recorded)
}

func TestSampler(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int // of 100000, within 20% (1% is 1000±201: six standard deviations)
	}{{"1", 100000}, {"0", 0}, {"100%", 100000}, {"0.5", 50000}, {"1%", 1000}} {
		t.Run(tc.in, func(t *testing.T) {
			s, err := ParseSampler(tc.in)
			require.NoError(t, err)
			n := 0
			for range 100000 {
				if s.Sample() {
					n++
				}
			}
			assert.InDelta(t, tc.want, n, float64(tc.want)*0.2+1)
		})
	}
	for _, bad := range []string{"", "x", "-0.1", "1.5", "NaN", "200%"} {
		_, err := ParseSampler(bad)
		assert.Error(t, err, bad)
	}
	assert.False(t, Sampler{}.Sample(), "the zero Sampler samples nothing")
}

func TestSampleDoesNotAllocate(t *testing.T) {
	p, err := NewPipeline(PipelineConfig{Store: &memWriter{}, Sampler: Sampler{threshold: 1 << 56}})
	require.NoError(t, err)
	defer p.Close(context.Background())
	assert.Zero(t, testing.AllocsPerRun(1000, func() { p.Sample() }))
}

func BenchmarkSampleUnsampled(b *testing.B) {
	p, err := NewPipeline(PipelineConfig{Store: &memWriter{}, Sampler: Sampler{}})
	require.NoError(b, err)
	defer p.Close(context.Background())
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if p.Sample() {
			b.Fatal("sampled")
		}
	}
}
