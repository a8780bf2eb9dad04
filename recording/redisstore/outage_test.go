package redisstore

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/retrace-dev/retrace/internal/testenv"
	"github.com/retrace-dev/retrace/recording"
	"github.com/retrace-dev/retrace/recording/storetest"
)

// faultProxy stands between the store and the real redis-server: killed,
// it closes every connection and refuses new ones; frozen, it accepts and
// holds connections but forwards nothing; slow, it delays every chunk.
type faultProxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	mode  string
	conns []net.Conn
	wg    sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	p := &faultProxy{t: t, target: target}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.serve(c)
		}
	})
}

func (p *faultProxy) serve(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			for {
				p.mu.Lock()
				mode := p.mode
				p.mu.Unlock()
				if mode != "frozen" {
					if mode == "slow" {
						time.Sleep(5 * time.Millisecond)
					}
					break
				}
				time.Sleep(time.Millisecond)
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	p.wg.Go(func() { pipe(up, c) })
	p.wg.Go(func() { pipe(c, up) })
}

func (p *faultProxy) set(mode string) {
	p.mu.Lock()
	prev := p.mode
	p.mode = mode
	conns := p.conns
	ln := p.ln
	if mode == "killed" {
		p.conns, p.ln = nil, nil
	}
	p.mu.Unlock()
	switch {
	case mode == "killed":
		if ln != nil {
			ln.Close()
		}
		for _, c := range conns {
			c.Close()
		}
	case prev == "killed":
		p.listen(p.addr) // back on the same port
	}
}

func (p *faultProxy) close() {
	p.set("killed")
	p.wg.Wait()
}

// A real redis-server behind a proxy that kills, freezes or slows it: the
// pipeline loses nothing that fits its buffer, and counts every drop.
func TestPipelineSurvivesRedisOutages(t *testing.T) {
	addr := testenv.RedisAddr(t)
	one := recording.Cost(storetest.Session("x0000"))
	for _, mode := range []string{"killed", "frozen", "slow"} {
		t.Run(mode, func(t *testing.T) {
			proxy := newFaultProxy(t, addr)
			prefix := testPrefix(t, addr)
			c := redis.NewClient(&redis.Options{Addr: proxy.addr, ContextTimeoutEnabled: true, MaxRetries: -1,
				DialTimeout: 50 * time.Millisecond})
			st := New(c, recording.WithKeyPrefix(prefix))
			const fits, offered = 50, 120
			pipe, err := recording.NewPipeline(recording.PipelineConfig{Store: st, Sampler: mustSample(t),
				BufferBytes: fits * one, BatchSize: 16, RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond,
				WriteTimeout: 100 * time.Millisecond})
			require.NoError(t, err)
			require.True(t, pipe.Submit(storetest.Session("before")))
			require.NoError(t, pipe.Flush(context.Background()), "the store works before the outage")

			proxy.set(mode)
			accepted := 0
			for i := range offered {
				if pipe.Submit(storetest.Session(fmt.Sprintf("x%04d", i))) {
					accepted++
				}
			}
			if mode != "slow" {
				require.Eventually(t, func() bool { return pipe.Stats().WriteErrors > 0 }, 10*time.Second, time.Millisecond,
					"the outage is seen")
				time.Sleep(200 * time.Millisecond) // an outage of several retries
			}
			assert.GreaterOrEqual(t, accepted, fits-2, "what fits the buffer is kept")
			proxy.set("")
			require.NoError(t, pipe.Close(context.Background()))
			s := pipe.Stats()
			assert.EqualValues(t, accepted+1, s.Recorded)
			assert.EqualValues(t, offered-accepted, s.Dropped, "every drop counted")

			check := New(redis.NewClient(&redis.Options{Addr: addr}), recording.WithKeyPrefix(prefix))
			defer check.Close()
			assert.Len(t, storetest.ScanIDs(t, check), accepted+1, "every kept session is in Redis")
		})
	}
}

func mustSample(t *testing.T) recording.Sampler {
	s, err := recording.NewSampler(1)
	require.NoError(t, err)
	return s
}
