package load

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
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
// the shared geometry (so that it merges without loss). The geometry is
// checked in the encoding's header first: the decoder allocates the counts
// of whatever geometry a header names, up to ~50 MB for a wide one.
func DecodeHistogram(s string) (*hdr.Histogram, error) {
	if s == "" {
		return NewHistogram(), nil
	}
	if err := checkGeometry(s); err != nil {
		return nil, err
	}
	h, err := hdr.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("decoding histogram: %w", err)
	}
	if err := wantGeometry(h.LowestTrackableValue(), h.HighestTrackableValue(), h.SignificantFigures()); err != nil {
		return nil, err
	}
	out := NewHistogram()
	if dropped := out.Merge(h); dropped != 0 {
		return nil, fmt.Errorf("histogram has %d values out of range", dropped)
	}
	return out, nil
}

// checkGeometry reads the geometry from the header of a V2 compressed
// encoding (base64 of: cookie and length, 4 bytes each, then zlib of a
// 40-byte header — cookie, payload length, normalizing offset, significant
// digits as int32, lowest and highest trackable value as int64, a float64
// ratio — and the counts) without inflating the counts. Anything it cannot
// read is left to hdr.Decode to report.
func checkGeometry(s string) error {
	const header = 40
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) < 8 {
		return nil
	}
	z, err := zlib.NewReader(bytes.NewReader(raw[8:]))
	if err != nil {
		return nil
	}
	defer z.Close()
	var h [header]byte
	if _, err := io.ReadFull(z, h[:]); err != nil {
		return nil
	}
	digits := int32(binary.BigEndian.Uint32(h[12:16]))
	lowest := int64(binary.BigEndian.Uint64(h[16:24]))
	highest := int64(binary.BigEndian.Uint64(h[24:32]))
	return wantGeometry(lowest, highest, int64(digits))
}

func wantGeometry(lowest, highest, digits int64) error {
	if lowest != histLowest || digits != histDigits || highest > histHighest {
		return fmt.Errorf("histogram has geometry [%d, %d] with %d digits, want [%d, %d] with %d",
			lowest, highest, digits, histLowest, histHighest, histDigits)
	}
	return nil
}

// Millis converts a histogram value (µs) to milliseconds.
func Millis(us int64) float64 { return float64(us) / 1000 }
