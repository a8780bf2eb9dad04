package raw_test

import (
	"testing"

	"github.com/retrace-dev/retrace/internal/agenttest"
	"github.com/retrace-dev/retrace/wire/raw"
	"github.com/retrace-dev/retrace/wire/wiretest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var samples = []wiretest.Sample{{
	Name:           "line protocol",
	Unframed:       true,
	NoMissingError: true,
	Exchanges: []wiretest.Exchange{
		{Request: []byte("PING a\n"), Response: []byte("PONG a\n")},
		{Request: []byte("GET key tag\n"), Response: []byte("VALUE 1\n")},
	},
}, {
	Name:           "binary",
	Unframed:       true,
	NoMissingError: true,
	NoDecode:       true,
	Exchanges:      []wiretest.Exchange{{Request: []byte{0x00, 0xff, 0x10}, Response: []byte{0x01}}},
}}

func TestConformance(t *testing.T) { wiretest.Conform(t, raw.Protocol, samples...) }

func FuzzFramers(f *testing.F) { wiretest.FuzzFramers(f, raw.Protocol, samples...) }

// TestRecordReplay: the line protocol of internal/agenttest ("PING w\n").
func TestRecordReplay(t *testing.T) {
	s := agenttest.NewLineServer(t)
	wiretest.RecordReplay(t, wiretest.Scenario{Proto: raw.Name, Dst: s.Addr, Stop: s.Close,
		NewClient: func(dst string) wiretest.Client {
			return &wiretest.LineClient{Dst: dst, Read: wiretest.ReadLine,
				Request: func(i, n int) string { return "PING " + string(rune('a'+n)) + "-" + itoa(i) + "\n" }}
		}})
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
