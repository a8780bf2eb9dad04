package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/retrace-dev/retrace/trace"
)

// Service is the fan-out handler under test. A request GET /work/<id>
// starts, from the handler, a plain go statement calling the line
// protocol, an errgroup goroutine calling Redis (SET then GET of
// k:<id>), and an errgroup goroutine whose own child (a grandchild of the
// handler) calls the HTTP downstream at EchoURL+"/echo/<id>" through the
// shared keep-alive client. Every downstream payload names <id>. Nil
// downstreams are skipped.
type Service struct {
	Line    *LinePool
	Redis   *redis.Client
	HTTP    *http.Client
	EchoURL string
}

// Result is the service's JSON answer.
type Result struct {
	ID string `json:"id"`
	// Seen maps each goroutine of the fan-out ("handler", "go",
	// "errgroup", "grandchild") to trace.CurrentID() there.
	Seen map[string]string `json:"seen"`
	// Retrace lists the Retrace-* headers the handler saw (must be none).
	Retrace []string  `json:"retrace,omitempty"`
	Line    string    `json:"line,omitempty"`
	Redis   string    `json:"redis,omitempty"`
	Echo    EchoReply `json:"echo"`
	Errors  []string  `json:"errors,omitempty"`
}

func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/work/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	res := Result{ID: id, Seen: map[string]string{"handler": trace.CurrentID()}}
	for k := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "retrace-") {
			res.Retrace = append(res.Retrace, k)
		}
	}
	var mu sync.Mutex
	seen := func(where string) {
		tid := trace.CurrentID()
		mu.Lock()
		res.Seen[where] = tid
		mu.Unlock()
	}
	fail := func(err error) {
		mu.Lock()
		res.Errors = append(res.Errors, err.Error())
		mu.Unlock()
	}
	ctx := r.Context()
	var wg sync.WaitGroup
	if s.Line != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen("go")
			got, err := s.Line.Ping(id)
			if err != nil {
				fail(fmt.Errorf("line: %w", err))
			}
			mu.Lock()
			res.Line = got
			mu.Unlock()
		}()
	}
	var g errgroup.Group
	if s.Redis != nil {
		g.Go(func() error {
			seen("errgroup")
			got, err := s.redis(ctx, id)
			mu.Lock()
			res.Redis = got
			mu.Unlock()
			return err
		})
	}
	if s.HTTP != nil {
		g.Go(func() error {
			done := make(chan error, 1)
			go func() {
				seen("grandchild")
				echo, err := s.echo(ctx, id)
				mu.Lock()
				res.Echo = echo
				mu.Unlock()
				done <- err
			}()
			return <-done
		})
	}
	if err := g.Wait(); err != nil {
		fail(err)
	}
	wg.Wait()
	w.Header().Set("Content-Type", "application/json")
	if len(res.Errors) > 0 {
		w.WriteHeader(http.StatusBadGateway)
	}
	_ = json.NewEncoder(w).Encode(&res)
}

func (s *Service) redis(ctx context.Context, id string) (string, error) {
	key := "k:" + id
	if err := s.Redis.Set(ctx, key, id, 0).Err(); err != nil {
		return "", fmt.Errorf("redis SET: %w", err)
	}
	got, err := s.Redis.Get(ctx, key).Result()
	if err != nil {
		return "", fmt.Errorf("redis GET: %w", err)
	}
	return got, nil
}

func (s *Service) echo(ctx context.Context, id string) (EchoReply, error) {
	var er EchoReply
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.EchoURL+"/echo/"+id, nil)
	if err != nil {
		return er, err
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return er, fmt.Errorf("http downstream: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return er, fmt.Errorf("http downstream: %w", err)
	}
	if err := json.Unmarshal(body, &er); err != nil {
		return er, fmt.Errorf("http downstream answered %q: %w", body, err)
	}
	return er, nil
}

// EchoReply is what the echoing HTTP downstream (and the mock, for HTTP)
// answers: the path and every header it received.
type EchoReply struct {
	Path    string      `json:"path"`
	Headers http.Header `json:"headers"`
}

// EchoHandler answers every request with an EchoReply.
func EchoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(EchoReply{Path: r.URL.Path, Headers: r.Header})
	})
}
