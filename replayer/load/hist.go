package load

import (
	"fmt"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram geometry shared by every writer and reader of results, so that
// histograms of different shards and runs merge exactly: microseconds from
// 1 µs to 1 hour with 3 significant digits (0.1% resolution).
const (
	histLowest  = 1
	histHighest = int64(time.Hour / time.Microsecond)
	histDigits  = 3
)

// NewHistogram returns an empty latency histogram in microseconds with the
// shared geometry.
func NewHistogram() *hdr.Histogram { return hdr.New(histLowest, histHighest, histDigits) }

// recordLatency adds d, clamped to the histogram's range.
func recordLatency(h *hdr.Histogram, d time.Duration) {
	us := int64(d / time.Microsecond)
	if us < histLowest {
		us = histLowest
	}
	if us > histHighest {
		us = histHighest
	}
	_ = h.RecordValue(us) // in range by construction
}

// EncodeHistogram returns h in the HdrHistogram V2 compressed encoding
// (base64), the form stored in results files.
func EncodeHistogram(h *hdr.Histogram) (string, error) {
	b, err := h.Encode(hdr.V2CompressedEncodingCookieBase)
	if err != nil {
		return "", fmt.Errorf("encoding histogram: %w", err)
	}
	return string(b), nil
}

// DecodeHistogram decodes EncodeHistogram's output into a histogram with
// the shared geometry (so that it merges without loss).
func DecodeHistogram(s string) (*hdr.Histogram, error) {
	if s == "" {
		return NewHistogram(), nil
	}
	h, err := hdr.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("decoding histogram: %w", err)
	}
	if h.LowestTrackableValue() != histLowest || h.SignificantFigures() != histDigits || h.HighestTrackableValue() > histHighest {
		return nil, fmt.Errorf("histogram has geometry [%d, %d] with %d digits, want [%d, %d] with %d",
			h.LowestTrackableValue(), h.HighestTrackableValue(), h.SignificantFigures(), histLowest, histHighest, histDigits)
	}
	out := NewHistogram()
	if dropped := out.Merge(h); dropped != 0 {
		return nil, fmt.Errorf("histogram has %d values out of range", dropped)
	}
	return out, nil
}

// Millis converts a histogram value (µs) to milliseconds.
func Millis(us int64) float64 { return float64(us) / 1000 }
