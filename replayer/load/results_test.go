package load

import (
	"bytes"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

func TestHistogramRoundTripMergesExactly(t *testing.T) {
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := int64(1); i < 50000; i += 7 {
		d := time.Duration(i*i%3_000_000) * time.Microsecond
		recordLatency(all, d)
		if i%2 == 0 {
			recordLatency(a, d)
		} else {
			recordLatency(b, d)
		}
	}
	recordLatency(all, 2*time.Hour) // clamped, in both
	recordLatency(a, 2*time.Hour)
	merged := NewHistogram()
	for _, h := range []*hdr.Histogram{a, b} {
		s, err := EncodeHistogram(h)
		if err != nil {
			t.Fatal(err)
		}
		d, err := DecodeHistogram(s)
		if err != nil {
			t.Fatal(err)
		}
		merged.Merge(d)
	}
	if !merged.Equals(all) {
		t.Errorf("merged histograms differ from the histogram of all values: p99 %d vs %d", merged.ValueAtQuantile(99), all.ValueAtQuantile(99))
	}
}

func TestDecodeHistogramRejectsOtherGeometry(t *testing.T) {
	other, err := EncodeHistogram(hdr.New(1, 1000, 2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeHistogram(other); err == nil {
		t.Error("a histogram of another geometry accepted")
	}
	if _, err := DecodeHistogram("not base64!"); err == nil {
		t.Error("garbage accepted")
	}
}

// FuzzReadResults checks that results.json and the histograms in it decode
// without panicking, whatever the bytes.
func FuzzReadResults(f *testing.F) {
	h := NewHistogram()
	recordLatency(h, 3*time.Millisecond)
	enc, _ := EncodeHistogram(h)
	var buf bytes.Buffer
	_ = WriteResults(&buf, &Results{V: 1, Shard: "0/1", Total: Stats{API: "total", Count: 1, Hist: enc}, APIs: []Stats{{API: "GET /a", Count: 1, Hist: enc}}})
	f.Add(buf.Bytes())
	f.Add([]byte(`{"v":1,"total":{"hist":"HISTFAAAACR4nJNpmSzMwMDAxAABzFCaEUTMmzwNzH8AEW0"}}`))
	f.Add([]byte(`{"v":2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := ReadResults(bytes.NewReader(data), "fuzz")
		if err != nil {
			return
		}
		for _, s := range append([]Stats{res.Total}, res.APIs...) {
			if h, err := DecodeHistogram(s.Hist); err == nil {
				_ = h.ValueAtQuantile(99)
			}
		}
	})
}

// A histogram of another, wide geometry is rejected before its counts are
// allocated: its header alone would make the decoder allocate ~50 MB.
func TestDecodeHistogramRejectsWideGeometryCheaply(t *testing.T) {
	wide, err := EncodeHistogram(hdr.New(1, math.MaxInt64/2, 5))
	if err != nil {
		t.Fatal(err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, err = DecodeHistogram(wide)
	runtime.ReadMemStats(&m1)
	if err == nil || !strings.Contains(err.Error(), "geometry") {
		t.Fatalf("DecodeHistogram of [1, MaxInt64/2] at 5 digits: %v, want a geometry error", err)
	}
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 1<<20 {
		t.Errorf("rejecting it allocated %d bytes", got)
	}
}
