package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/retrace-dev/retrace/examples/orders"
)

// Service is the orders example running as a child process: the agent
// patches the process it runs in, so the service under record or replay
// never shares a process with the recorder's reader, the mock server or the
// replayer.
type Service struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	err  error // set before done closes
	once sync.Once
}

// ServiceSpec says how to start the service process.
type ServiceSpec struct {
	// Path and Args run the service; it must print ListeningPrefix and
	// its address on stderr once it listens.
	Path string
	Args []string
	// ListeningPrefix starts the line that says the service listens; empty
	// means orders.ListeningPrefix.
	ListeningPrefix string
	// Env is added to this process's environment (later entries win).
	Env []string
	// Log receives the child's stderr and stdout; nil discards them.
	Log io.Writer
	// StartTimeout bounds the wait for the listening line; zero means 20s.
	StartTimeout time.Duration
}

// StartService starts the process of spec and waits until it listens.
func StartService(ctx context.Context, spec ServiceSpec) (*Service, error) {
	if spec.StartTimeout == 0 {
		spec.StartTimeout = 20 * time.Second
	}
	if spec.Log == nil {
		spec.Log = io.Discard
	}
	if spec.ListeningPrefix == "" {
		spec.ListeningPrefix = orders.ListeningPrefix
	}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Stdout = spec.Log
	pr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start service %s: %w", spec.Path, err)
	}
	s := &Service{cmd: cmd, done: make(chan struct{})}
	addrc := make(chan string, 1)
	var tail tailBuffer
	go func() {
		sc := bufio.NewScanner(pr)
		found := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(spec.Log, line)
			tail.add(line)
			if a, ok := strings.CutPrefix(line, spec.ListeningPrefix); ok && !found {
				found = true
				addrc <- strings.TrimSpace(a)
			}
		}
		io.Copy(spec.Log, pr)
		s.err = cmd.Wait()
		close(s.done)
	}()
	timer := time.NewTimer(spec.StartTimeout)
	defer timer.Stop()
	select {
	case s.addr = <-addrc:
		return s, nil
	case <-s.done:
		return nil, fmt.Errorf("demo: service %s exited before listening (%v): %s", spec.Path, s.err, tail.String())
	case <-timer.C:
		s.Stop()
		return nil, fmt.Errorf("demo: service %s did not listen within %v: %s", spec.Path, spec.StartTimeout, tail.String())
	case <-ctx.Done():
		s.Stop()
		return nil, ctx.Err()
	}
}

// Addr is the host:port the service listens on.
func (s *Service) Addr() string { return s.addr }

// URL is the service's base URL.
func (s *Service) URL() string { return "http://" + s.addr }

// Stop asks the service to shut down (SIGTERM), kills it after 15s, and
// waits for it to exit. It is safe to call more than once.
func (s *Service) Stop() error {
	s.once.Do(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
	})
	<-s.done
	var ee *exec.ExitError
	if errors.As(s.err, &ee) && ee.Exited() {
		return fmt.Errorf("demo: service exited with status %d", ee.ExitCode())
	}
	if errors.As(s.err, &ee) {
		return nil // ended by our signal
	}
	return s.err
}

// tailBuffer keeps the last lines of a child's output for error messages.
type tailBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (t *tailBuffer) add(l string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, l)
	if len(t.lines) > 8 {
		t.lines = t.lines[1:]
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}
