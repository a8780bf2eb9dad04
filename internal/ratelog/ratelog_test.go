package ratelog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRepeatedMessagesAreLimitedPerWindow(t *testing.T) {
	var buf bytes.Buffer
	suppressed := 0
	h := New(slog.NewTextHandler(&buf, nil), Config{Window: time.Minute, Burst: 3, OnSuppress: func(n int) { suppressed += n }})
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h.st.now = func() time.Time { return clock }
	log := slog.New(h).With("conn", 7)
	for i := range 1000 {
		log.Info("missing mock", "i", i)
	}
	log.Warn("another message")
	if got := strings.Count(buf.String(), "msg=\"missing mock\""); got != 3 {
		t.Fatalf("%d missing-mock lines passed in one window, want 3:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), "another message") {
		t.Fatalf("a distinct message was held back:\n%s", buf.String())
	}
	if suppressed != 997 || h.Suppressed() != 997 {
		t.Fatalf("suppressed %d (handler says %d), want 997", suppressed, h.Suppressed())
	}
	clock = clock.Add(time.Minute)
	log.Info("missing mock", "i", 1000)
	out := buf.String()
	if !strings.Contains(out, `msg="repeated log line suppressed" conn=7 message="missing mock" count=997`) {
		t.Fatalf("no count of the held-back lines after the window:\n%s", out)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "i=1000") {
		t.Fatalf("the first line of the new window did not pass:\n%s", out)
	}
}

func TestFlushReportsHeldLines(t *testing.T) {
	var buf bytes.Buffer
	h := New(slog.NewTextHandler(&buf, nil), Config{Burst: 1})
	log := slog.New(h)
	log.Info("refused")
	log.Info("refused")
	log.Info("refused")
	h.Flush(context.Background())
	if !strings.Contains(buf.String(), `message=refused count=2`) {
		t.Fatalf("flush did not report the held lines:\n%s", buf.String())
	}
	h.Flush(context.Background())
	if strings.Count(buf.String(), "suppressed") != 1 {
		t.Fatalf("a second flush reported again:\n%s", buf.String())
	}
}
