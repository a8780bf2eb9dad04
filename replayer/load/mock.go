package load

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/retrace-dev/retrace/mockserver"
)

// MockAnswers is what one mock server's admin API said of the answers it
// gave during a run (a write-path load test, whose baffled calls a mock
// answers): the time it took per answer, so that a run's results show the
// latency the mock added beside the target's.
type MockAnswers struct {
	// Admin is the mock server's admin URL.
	Admin string `json:"admin"`
	mockserver.AnswerTimes
}

// MockWatch reads the answer times of mock servers at the start and the
// end of a run; what they answered in between is the run's.
type MockWatch struct {
	client *http.Client
	admins []string
	before []*hdr.Histogram
}

// WatchMocks takes the first reading of each admin URL's GET /answers. An
// admin that does not answer is an error naming it: a run whose mock
// figures are missing would pass on nothing.
func WatchMocks(ctx context.Context, admins []string) (*MockWatch, error) {
	w := &MockWatch{client: &http.Client{Timeout: 10 * time.Second}}
	for _, a := range admins {
		a = strings.TrimRight(strings.TrimSpace(a), "/")
		if a == "" {
			continue
		}
		h, _, err := w.read(ctx, a)
		if err != nil {
			return nil, err
		}
		w.admins = append(w.admins, a)
		w.before = append(w.before, h)
	}
	return w, nil
}

func (w *MockWatch) read(ctx context.Context, admin string) (*hdr.Histogram, mockserver.AnswerTimes, error) {
	var a mockserver.AnswerTimes
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/answers", nil)
	if err != nil {
		return nil, a, fmt.Errorf("mock admin %q: %w", admin, err)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return nil, a, fmt.Errorf("mock admin %s: %w", admin, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, a, fmt.Errorf("mock admin %s/answers: %s: %s", admin, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return nil, a, fmt.Errorf("mock admin %s/answers: %w", admin, err)
	}
	h, err := mockserver.DecodeAnswers(a.Hist)
	if err != nil {
		return nil, a, fmt.Errorf("mock admin %s: %w", admin, err)
	}
	return h, a, nil
}

// Stop takes the second reading and returns, per mock, the answers given
// since WatchMocks.
func (w *MockWatch) Stop(ctx context.Context) ([]MockAnswers, error) {
	var out []MockAnswers
	for i, a := range w.admins {
		after, _, err := w.read(ctx, a)
		if err != nil {
			return out, err
		}
		d, err := mockserver.SummarizeAnswers(subtract(after, w.before[i]))
		if err != nil {
			return out, err
		}
		out = append(out, MockAnswers{Admin: a, AnswerTimes: d})
	}
	return out, nil
}

// subtract returns the counts of after less those of before, bucket by
// bucket (both of mockserver's geometry, before a reading of the same
// histogram taken earlier).
func subtract(after, before *hdr.Histogram) *hdr.Histogram {
	earlier := map[int64]int64{}
	for _, b := range before.Distribution() {
		if b.Count != 0 {
			earlier[b.From] = b.Count
		}
	}
	out := mockserver.NewAnswerHistogram()
	for _, b := range after.Distribution() {
		if n := b.Count - earlier[b.From]; n > 0 {
			_ = out.RecordValues(b.From, n)
		}
	}
	return out
}

// MergeMockAnswers merges the answers of several mocks (several shards'
// readings of one mock count once: the one that saw most).
func MergeMockAnswers(all []MockAnswers) (mockserver.AnswerTimes, error) {
	best := map[string]MockAnswers{}
	for _, m := range all {
		if cur, ok := best[m.Admin]; !ok || m.Answers > cur.Answers {
			best[m.Admin] = m
		}
	}
	h := mockserver.NewAnswerHistogram()
	for _, m := range best {
		mh, err := mockserver.DecodeAnswers(m.Hist)
		if err != nil {
			return mockserver.AnswerTimes{}, fmt.Errorf("mock %s: %w", m.Admin, err)
		}
		h.Merge(mh)
	}
	return mockserver.SummarizeAnswers(h)
}
