package regress

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/retrace-dev/retrace/replayer/diff"
	"github.com/retrace-dev/retrace/wire"
	"github.com/retrace-dev/retrace/wire/http1"
	"github.com/retrace-dev/retrace/wire/http2"
	"github.com/retrace-dev/retrace/wire/protocols"
)

// Status is the verdict of one replay.
type Status string

// Verdicts.
const (
	Passed  Status = "passed" // no difference outside the rules
	Failed  Status = "failed" // at least one difference (in A/B mode: a regression)
	Errored Status = "error"  // not compared: unreachable, timeout, reset, bad recording
)

// Where a difference was found.
const (
	InResponse   = "response"
	InDownstream = "downstream"
	// InRandom: the replay drew randomness its recording does not have
	// (RETRACE_RANDOM): Path names the source and the draw number, from 1
	// ("crypto/rand[3]"), from which on it got real randomness.
	InRandom = "random"
)

// Finding is one difference of a replay, placed in the response or in a
// downstream call.
type Finding struct {
	diff.Difference
	Where string   `json:"where"`          // InResponse or InDownstream
	Call  *CallRef `json:"call,omitempty"` // the downstream call, for InDownstream
}

// Label is the finding's location for people: "body.items[3].price" or
// "downstream #2 redis 10.0.0.7:6379: args[2]".
func (f Finding) Label() string {
	if f.Call == nil {
		return f.Path
	}
	return f.Call.String() + ": " + f.Path
}

// key identifies what a finding is about and what the replay produced; A/B
// mode compares the keys of candidate and baseline.
func (f Finding) key() string {
	c := ""
	if f.Call != nil {
		c = f.Call.identity()
	}
	return f.Where + "\x00" + c + "\x00" + f.Path + "\x00" + string(f.Kind) + "\x00" + f.Got
}

// CallRef names a downstream call.
type CallRef struct {
	Seq     int    `json:"seq"`     // order of arrival at the mock in this replay; -1 for a recorded call never made
	Matched int    `json:"matched"` // Seq of the recorded call; -1 for a call without recording
	Proto   string `json:"proto"`
	Dst     string `json:"dst"`
	Summary string `json:"summary"` // request line, Redis command, SQL, or a byte excerpt
}

func (c *CallRef) String() string {
	switch {
	case c.Seq < 0:
		return fmt.Sprintf("downstream recorded #%d %s %s", c.Matched, c.Proto, c.Dst)
	default:
		return fmt.Sprintf("downstream #%d %s %s", c.Seq, c.Proto, c.Dst)
	}
}

// identity is stable across replays of one recording: the recorded call
// matched, or for calls without recording their destination and summary.
func (c *CallRef) identity() string {
	if c.Matched >= 0 {
		return "m" + strconv.Itoa(c.Matched)
	}
	return "x" + c.Proto + " " + c.Dst + " " + c.Summary
}

// Result is the outcome of one replay of one session.
type Result struct {
	Session string        `json:"session"`          // recording id
	Trace   string        `json:"trace"`            // trace id of the (candidate) replay
	Replay  int           `json:"replay,omitempty"` // 0..Repeat-1
	API     string        `json:"api"`
	Status  Status        `json:"status"`
	Error   string        `json:"error,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Findings are the differences that make the session fail.
	Findings []Finding `json:"findings,omitempty"`
	// Preexisting (A/B mode) are differences the baseline shows too.
	Preexisting []Finding `json:"preexisting,omitempty"`
	// Detail holds what a reviewer needs to see a failing session; set
	// for failed and errored sessions only.
	Detail *Detail `json:"-"`
}

// Name is the session id, with "#k" for repeated replays after the first.
func (r *Result) Name() string {
	if r.Replay == 0 {
		return r.Session
	}
	return r.Session + "#" + strconv.Itoa(r.Replay)
}

// Detail is the evidence of a failing session.
type Detail struct {
	Request  []byte                // the recorded inbound request, capped
	Recorded *http1.ParsedResponse // the recorded response
	Replayed *http1.ParsedResponse // the candidate's response; nil when it failed
	Baseline *http1.ParsedResponse // A/B mode: the baseline's response
	Calls    []CallDetail          // downstream calls, in order of arrival, then unused recorded calls
	// HTTP/2 and gRPC sessions: the request and the responses in their
	// decoded form (wire/http2: method, path, status, header.x,
	// message[i].field, trailer.x, grpc-status, grpc-message); nil for
	// HTTP/1 sessions, and ReplayedForm when the replay failed.
	RequestForm, RecordedForm, ReplayedForm, BaselineForm *wire.Decoded
}

// CallDetail is one downstream call of a failing session.
type CallDetail struct {
	CallRef
	Recorded []byte // the recorded request; nil for a call without recording
	Replayed []byte // the request the replay made; nil for a recorded call never made
	Diffs    []diff.Difference
	// RecordedForm and ReplayedForm are the two requests decoded, when
	// the replayer decoded them itself (gRPC with a schema); nil: the
	// report decodes them by their protocol.
	RecordedForm, ReplayedForm *wire.Decoded
}

// maxDetailBytes caps each payload kept in a Detail.
const maxDetailBytes = 256 << 10

func capBytes(b []byte) []byte {
	if len(b) > maxDetailBytes {
		return b[:maxDetailBytes:maxDetailBytes]
	}
	return b
}

func capResponse(r *http1.ParsedResponse) *http1.ParsedResponse {
	if r == nil || len(r.Body) <= maxDetailBytes {
		return r
	}
	c := *r
	c.Body, c.Truncated = capBytes(r.Body), true
	return &c
}

// summarize renders a downstream request in one line: the first line of
// its protocol's decoded form, else its first bytes quoted.
func summarize(proto string, req []byte) string {
	if proto == http2.GRPCName || proto == http2.Name {
		if m, _, err := http2.ParseMessage(req); err == nil {
			return cut(http2.DecodeMessage(false, m, nil, "").Text, 120)
		}
	}
	if d, ok := protocols.All.For(proto).Decode(wire.Client, req); ok {
		line, _, _ := strings.Cut(d.Text, "\n")
		return cut(line, 120)
	}
	return cut(strconv.Quote(string(req[:min(len(req), 60)])), 120)
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
