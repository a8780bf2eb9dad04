package trace

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"time"
)

// MaxHeld is the most bytes InboundParser.Feed ever holds back between
// calls: the start of a header line that may still turn out to be a
// Retrace-* header ("Retrace" without its dash). Feed(out, in) therefore
// appends at most len(in)+MaxHeld bytes to out.
const MaxHeld = len(retracePrefix) - 1

// MaxPathLen bounds RequestHead.Path; longer request targets are cut.
const MaxPathLen = 2048

// retracePrefix is the lower-case start of every header the agent strips.
const retracePrefix = "retrace-"

// Header values the parser keeps (Retrace-*, Content-Length,
// Transfer-Encoding, traceparent) are read up to valCap bytes; a longer one
// is invalid. Header names are compared up to nameCap bytes.
const (
	valCap  = 128
	nameCap = 24
	// badValueCap bounds RequestHead.BadValue.
	badValueCap = 80
)

// RequestHead is what InboundParser learned from one request's header
// block.
type RequestHead struct {
	// TraceID is the request's Retrace-Trace-Id when it is a ValidID, else "".
	TraceID string
	// BadTraceID reports a Retrace-Trace-Id that was not a ValidID, or
	// several that disagree. The header was stripped and is ignored;
	// BadValue holds the rejected value so the caller can log it once.
	BadTraceID bool
	// ReplayTime is Retrace-Replay-Time (unix nanoseconds), zero when absent.
	ReplayTime time.Time
	// BadReplayTime reports a Retrace-Replay-Time that was not a positive
	// decimal integer; it was stripped and ignored.
	BadReplayTime bool
	// Random holds Retrace-Replay-Seed and Retrace-Replay-Random; nil
	// when the request carries neither (a pointer, made only then, keeps
	// the head as small as it was).
	Random *ReplayHeaders
	// BadValue is the value of the last rejected Retrace-* header, cut to
	// 80 bytes, for the caller's log line.
	BadValue string
	// TraceParent is the trace-id (32 lower-case hex digits) of a valid W3C
	// traceparent header, else "". The header itself is not stripped.
	TraceParent string
	// Method and Path are from the request line; Path is the request
	// target as sent (path and query, or absolute form), cut to MaxPathLen.
	Method, Path string
	// Stripped counts the Retrace-* header lines removed from this request.
	Stripped int
}

// ReplayHeaders are the values of a replayed request's Retrace-Replay-Seed
// and Retrace-Replay-Random as sent (ParseReplaySeed and ParseReplayRandom
// read them), "" when absent.
type ReplayHeaders struct {
	Seed   string
	Random string // kept up to MaxReplayRandom bytes
	// BadRandom reports a Retrace-Replay-Random longer than that, dropped.
	BadRandom bool

	buf []byte // the Random value being read byte-wise
}

// replay returns the head's ReplayHeaders, made on first use.
func (h *RequestHead) replay() *ReplayHeaders {
	if h.Random == nil {
		h.Random = &ReplayHeaders{}
	}
	return h.Random
}

// InboundParser follows the bytes a client sends on one accepted
// connection, removes every Retrace-* header line from them, and reports
// each request's head. It knows HTTP/1.x message framing (Content-Length,
// chunked bodies and trailers, pipelining) so it finds every request on a
// keep-alive connection, and never looks for headers inside a body.
//
// When the connection does not carry HTTP/1.x (TLS, the HTTP/2 preface,
// any other protocol), or when a request is malformed so that its end
// cannot be known (bad Content-Length, a transfer coding other than
// chunked, a header line without a colon, ...), the parser turns into a
// pass-through for the rest of the connection: every later byte is
// delivered unchanged. A server rejects such requests itself. After a
// protocol switch (WebSocket or h2c upgrade, CONNECT tunnel) the client's
// bytes no longer look like a request line, so the same happens there.
//
// The zero value is ready to use, one per connection; it is not safe for
// concurrent use. Its memory does not grow: besides a fixed-size struct it
// keeps one buffer of at most MaxPathLen bytes.
type InboundParser struct {
	// NoPath leaves RequestHead.Path empty: a caller that does not use it
	// saves its copy (an allocation per request).
	NoPath bool

	// The fields a request read in whole lines touches come first, in as
	// few cache lines as they fit: a service's requests find them evicted,
	// each line a miss. The byte-wise states' buffers come last.
	state    pstate
	hdr      hdrKind
	long     bool // name or value did not fit
	strip    bool // the last header line was stripped (for obs-fold lines)
	chunked  bool
	teOther  bool
	conflict bool // several Retrace-Trace-Id values disagree
	nheld    int
	nname    int
	nval     int
	total    int64 // bytes emitted over the parser's life
	start    int64 // value of total at the first byte of the current request
	nreq     int64 // request heads completed
	// lastBase is total minus len(out) at the start of the last Feed: the
	// absolute position of that Feed's result.
	lastBase int64
	// Per request.
	clen    int64 // Content-Length; -1 when absent
	remain  int64 // bytes left of the body or of the current chunk
	nmethod int
	method  [16]byte
	path    []byte
	head    RequestHead

	held   [MaxHeld]byte // start of a header line that may be Retrace-*
	n      uint64
	digits int
	vi     int // index into "HTTP/1." while matching the version
	name   [nameCap]byte
	val    [valCap]byte
}

type pstate uint8

// The states from sMethod to sHeadEndLF are those inside a request head
// (HeadStart relies on their order).
const (
	sMsgStart pstate = iota // before a request line (the zero state)
	sMethod
	sTarget
	sVersion
	sReqLineCR
	sReqLineLF
	sLineStart // start of a header line: maybe holding a Retrace- prefix
	sName
	sValue
	sContValue  // obs-fold continuation of a kept header
	sStripName  // rest of a Retrace-* name, dropped
	sStripValue // rest of a Retrace-* line (or its continuation), dropped
	sHeadEndLF
	sBody
	sChunkSize
	sChunkExt
	sChunkSizeLF
	sChunkData
	sChunkDataCR
	sChunkDataLF
	sTrailerStart
	sTrailerLine
	sTrailerEndLF
	sPass
)

type hdrKind uint8

const (
	hOther hdrKind = iota
	hContentLength
	hTransferEncoding
	hTraceParent
	hRetraceTraceID
	hRetraceReplayTime
	hRetraceReplaySeed
	hRetraceReplayRandom
	hRetraceOther
)

// PassThrough reports whether the parser has given up on the connection
// (not HTTP/1.x, or framing it cannot follow): Feed then copies its input
// unchanged, and a caller may skip it.
func (p *InboundParser) PassThrough() bool { return p.state == sPass }

// Idle reports whether the parser sits between requests: everything fed so
// far ended exactly at the end of a message (or nothing was fed).
func (p *InboundParser) Idle() bool { return p.state == sMsgStart }

// Requests returns how many request heads have been completed.
func (p *InboundParser) Requests() int64 { return p.nreq }

// HeadStart reports whether the last Feed ended inside a request head (a
// request line or header block not finished yet), and where that request
// began: an index into the slice that Feed returned, smaller than the
// length out had on entry (or negative) when it began in an earlier call.
// Together with the offsets given to onRequest it tells, for every byte
// delivered, which request it belongs to, also when one read ends a
// request's body and starts the next request's head.
func (p *InboundParser) HeadStart() (start int, ok bool) {
	if p.state < sMethod || p.state > sHeadEndLF {
		return 0, false
	}
	return int(p.start - p.lastBase), true
}

// LikelyHTTP reports whether the request head in progress looks like
// HTTP so far: its method, made of upper-case letters, '-' and '_' as
// every registered method is, has been read up to the space after it, and
// the request target read so far has one of HTTP's forms: origin ("/…"),
// asterisk ("*"), absolute ("http://…", "https://…"), or after CONNECT,
// authority. RFC 9110 allows any token as a method, and the parser follows
// any request line; but a client of another protocol whose first message
// could pass for the start of one ("HELLO", "HELLO WORLD") is far more
// likely.
func (p *InboundParser) LikelyHTTP() bool {
	if p.state <= sMethod || p.state > sHeadEndLF {
		return false
	}
	for _, c := range p.method[:p.nmethod] {
		if !(c >= 'A' && c <= 'Z' || c == '-' || c == '_') {
			return false
		}
	}
	t := p.path
	if len(t) == 0 || t[0] == '/' || t[0] == '*' || string(p.method[:p.nmethod]) == "CONNECT" {
		return true
	}
	const scheme = "http"
	for i := 0; i < len(t) && i < len(scheme); i++ {
		if lower(t[i]) != scheme[i] {
			return false
		}
	}
	return true
}

// Held returns how many bytes Feed is holding back (0..MaxHeld).
func (p *InboundParser) Held() int { return p.nheld }

// Feed consumes in, the bytes just read from the connection, and appends
// to out the bytes the application must see: in, minus Retrace-* header
// lines, minus at most MaxHeld bytes held back until the next call decides
// whether they start such a line (plus the bytes held back by the previous
// call). out and in must not overlap, except that out may be in[:0] when
// Held() is 0: Feed then works in place, moving the bytes it delivers
// down over those it cuts out, and returns a prefix of in. (Every byte it
// writes there comes from in at the same index or later, and it reads no
// byte of in after writing over it.)
//
// onRequest (may be nil) is called for each request whose header block
// ends in in, in order, before Feed returns. Its offset argument is the
// index, in the slice Feed returns, of the first byte of that request's
// request line. When the request began in an earlier call the offset is
// smaller than len(out) on entry, and may be negative.
//
// Bytes held back when the connection ends are never delivered: they are
// the start of an incomplete header line that may be a Retrace-* header,
// in a request the server could not have served anyway.
func (p *InboundParser) Feed(out, in []byte, onRequest func(RequestHead, int)) []byte {
	if p.state == sPass {
		p.lastBase = p.total - int64(len(out))
		p.total += int64(len(in))
		return append(out, in...)
	}
	f := feed{out: out, in: in, base: p.total - int64(len(out)), onRequest: onRequest}
	i := 0
	for i < len(in) {
		c := in[i]
		switch p.state {
		case sMsgStart:
			switch {
			case c == '\r' || c == '\n':
				i++ // blank lines before a request line are tolerated
			case tchar(c):
				p.beginRequest(p.total + int64(i-f.run))
				p.state = sMethod
				if next, ok := p.requestLine(in, i); ok {
					i = next
				}
			default:
				p.state = sPass
			}
		case sMethod:
			switch {
			case tchar(c) && p.nmethod < len(p.method):
				p.method[p.nmethod] = c
				p.nmethod++
				i++
			case c == ' ' && p.nmethod > 0:
				p.state = sTarget
				i++
			default:
				p.state = sPass
			}
		case sTarget:
			i = p.target(in, i)
		case sVersion:
			const v = "HTTP/1."
			switch {
			case p.vi < len(v) && c == v[p.vi]:
				p.vi++
				i++
			case p.vi == len(v) && c >= '0' && c <= '9':
				p.state = sReqLineCR
				i++
			default:
				p.state = sPass
			}
		case sReqLineCR, sHeadEndLF, sReqLineLF, sChunkSizeLF, sChunkDataCR, sChunkDataLF, sTrailerEndLF:
			i = p.lineEnd(c, i, &f)
		case sLineStart:
			i = p.lineStart(c, i, &f)
		case sName:
			j := i
			for j < len(in) && nameByte(in[j]) {
				j++
			}
			if j < len(in) && in[j] == ':' && p.nname == 0 {
				// The whole name is in this read: classify it in place.
				p.hdr = kindOf(in[i:j])
				p.state = sValue
				i = j + 1
				break
			}
			p.addNameBytes(in[i:j])
			i = j
			if j < len(in) {
				if in[j] != ':' {
					p.state = sPass // header line without a colon
					break
				}
				p.hdr = p.classify()
				p.state = sValue
				i++
			}
		case sValue, sStripValue:
			i = p.value(in, i, &f)
		case sContValue, sChunkExt, sTrailerLine:
			j := bytes.IndexByte(in[i:], '\n')
			if j < 0 {
				i = len(in)
				break
			}
			i += j + 1
			switch p.state {
			case sContValue:
				p.state = sLineStart
			case sChunkExt:
				p.chunkSizeDone()
			default:
				p.state = sTrailerStart
			}
		case sStripName:
			switch {
			case c == ':':
				p.hdr = p.classify()
				p.state = sStripValue
			case c == '\n': // a Retrace- line without a colon: still dropped
				p.endHeader()
			default:
				p.addName(c)
			}
			i++
			f.run = i
		case sBody, sChunkData:
			n := int(min(int64(len(in)-i), p.remain))
			i += n
			p.remain -= int64(n)
			if p.remain == 0 {
				if p.state == sBody {
					p.state = sMsgStart
				} else {
					p.state = sChunkDataCR
				}
			}
		case sChunkSize:
			i = p.chunkSize(c, i)
		case sTrailerStart:
			switch c {
			case '\r':
				p.state = sTrailerEndLF
			case '\n':
				p.state = sMsgStart
			default:
				p.state = sTrailerLine
			}
			i++
		case sPass:
			i = len(in)
		}
	}
	p.flush(&f, len(in))
	p.lastBase = f.base
	return f.out
}

// feed is the state of one Feed call.
type feed struct {
	out, in   []byte
	run       int   // in[run:i] are bytes to deliver, not yet appended to out
	base      int64 // p.total minus len(out) when Feed was called
	onRequest func(RequestHead, int)
}

// flush appends the pending bytes in[run:i] to out.
func (p *InboundParser) flush(f *feed, i int) {
	f.out = append(f.out, f.in[f.run:i]...)
	p.total += int64(i - f.run)
	f.run = i
}

// targetEnd returns the index of the first byte of b that cannot be part of
// a request target (a control byte, a space or DEL), or len(b). It tests
// eight bytes at a time: targets are tens of bytes long. In each word the
// classic tests for a byte below 0x21 and for a zero byte (of w^0x7f…)
// flag the bytes that end a target; a borrow can flag a byte above a true
// one, never below, so the lowest flag is exact.
func targetEnd(b []byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; len(b)-i >= 8; i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		del := w ^ (ones * 0x7f)
		if m := ((w-ones*0x21)&^w | (del-ones)&^del) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if b[i] <= ' ' || b[i] == 0x7f {
			break
		}
	}
	return i
}

// requestLine is the fast path for a request line that lies whole in in,
// starting at in[i] (in sMethod, right after beginRequest): it reads the
// method, target and version in one step and returns where the header
// lines start, doing exactly what the byte-wise states would. It reports
// false, changing nothing, when the line is not whole or not one the
// byte-wise states accept without a doubt (they then decide).
func (p *InboundParser) requestLine(in []byte, i int) (next int, ok bool) {
	j := bytes.IndexByte(in[i:], '\n')
	if j < 0 {
		return 0, false
	}
	line := in[i : i+j]
	next = i + j + 1
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || sp > len(p.method) {
		return 0, false
	}
	method, rest := line[:sp], line[sp+1:]
	for _, c := range method {
		if !tchar(c) {
			return 0, false
		}
	}
	sp = targetEnd(rest)
	if sp == 0 || sp == len(rest) || rest[sp] != ' ' {
		return 0, false
	}
	target, version := rest[:sp], rest[sp+1:]
	const v = "HTTP/1."
	if len(version) != len(v)+1 || string(version[:len(v)]) != v || version[len(v)] < '0' || version[len(v)] > '9' {
		return 0, false
	}
	p.nmethod = copy(p.method[:], method)
	p.path = append(p.path, target[:min(len(target), MaxPathLen)]...)
	p.state = sLineStart
	p.nheld, p.strip, p.hdr = 0, false, hOther
	p.nname, p.nval, p.long = 0, 0, false
	return next, true
}

// target reads the request target up to the space before the version.
func (p *InboundParser) target(in []byte, i int) int {
	j := i + targetEnd(in[i:])
	if room := MaxPathLen - len(p.path); room > 0 {
		p.path = append(p.path, in[i:min(j, i+room)]...)
	}
	if j == len(in) {
		return j
	}
	if in[j] != ' ' || j == i && len(p.path) == 0 {
		p.state = sPass
		return j
	}
	p.state = sVersion
	p.vi = 0
	return j + 1
}

// value reads (part of) a header value up to and including its LF,
// delivering it or, in a Retrace-* line, dropping it.
func (p *InboundParser) value(in []byte, i int, f *feed) int {
	end := len(in)
	j := bytes.IndexByte(in[i:], '\n')
	if j >= 0 {
		end = i + j
	}
	if p.hdr != hOther && p.hdr != hRetraceOther {
		p.addValue(in[i:end])
	}
	if j < 0 {
		if p.state == sStripValue {
			f.run = end
		}
		return end
	}
	if p.state == sStripValue {
		f.run = end + 1
	}
	p.endHeader()
	return end + 1
}

// lineStart handles the first bytes of a header line: the end of the
// header block, an obs-fold continuation, or a name that may be Retrace-*,
// whose first bytes are held back until they decide it.
func (p *InboundParser) lineStart(c byte, i int, f *feed) int {
	if p.nheld == 0 {
		switch c {
		case '\r':
			p.state = sHeadEndLF
			return i + 1
		case '\n':
			p.state = sHeadEndLF
			return i // lineEnd consumes the LF
		case ' ', '\t': // obs-fold: continues the previous header line
			prev := p.hdr
			p.hdr = hOther
			switch {
			case p.strip:
				// Part of a stripped header: drop it too. A folded
				// Retrace-* value is not a valid one.
				switch prev {
				case hRetraceTraceID:
					p.head.BadTraceID = true
				case hRetraceReplayTime:
					p.head.BadReplayTime, p.head.ReplayTime = true, time.Time{}
				}
				p.flush(f, i)
				f.run = i + 1
				p.state = sStripValue
			case prev == hContentLength || prev == hTransferEncoding:
				p.state = sPass // framing we cannot be sure of
				return i
			default:
				p.state = sContValue
			}
			return i + 1
		}
	}
	if p.nheld == 0 {
		if next, ok := p.wholeLine(i, f); ok {
			// and the lines after it while they are whole header lines,
			// without a turn of Feed's loop each
			for p.state == sLineStart && next < len(f.in) {
				switch f.in[next] {
				case '\r', '\n', ' ', '\t':
					return next
				}
				n, ok := p.wholeLine(next, f)
				if !ok {
					break
				}
				next = n
			}
			return next
		}
	}
	if lower(c) == retracePrefix[p.nheld] {
		if p.nheld == 0 {
			p.flush(f, i)
		}
		if p.nheld == MaxHeld { // the whole prefix: drop the line
			p.nheld = 0
			p.head.Stripped++
			p.nname = copy(p.name[:], retracePrefix)
			p.long = false
			p.hdr = hRetraceOther
			p.state = sStripName
		} else {
			p.held[p.nheld] = c
			p.nheld++
		}
		f.run = i + 1
		return i + 1
	}
	// Not a Retrace- header: deliver what was held and read the name on.
	f.out = append(f.out, p.held[:p.nheld]...)
	p.total += int64(p.nheld)
	p.nname, p.long = 0, false
	for _, h := range p.held[:p.nheld] {
		p.addName(h)
	}
	p.nheld = 0
	p.strip = false
	p.state = sName
	return i
}

// wholeLine is the fast path for a header line that lies whole in this
// read, starting at in[i]: it strips or delivers it in one step, and does
// exactly what the byte-wise states would (the fuzz tests compare the two
// by cutting the same stream differently). It reports false, changing
// nothing, when the line is not whole or is malformed.
func (p *InboundParser) wholeLine(i int, f *feed) (next int, ok bool) {
	j := bytes.IndexByte(f.in[i:], '\n')
	if j < 0 {
		return 0, false
	}
	line := f.in[i : i+j]
	next = i + j + 1
	colon := bytes.IndexByte(line, ':')
	if len(line) >= len(retracePrefix) && equalFold(line[:len(retracePrefix)], retracePrefix) {
		p.flush(f, i)
		f.run = next // dropped
		p.head.Stripped++
		p.hdr = hRetraceOther
		var v []byte
		if colon >= 0 {
			if k := kindOf(line[:colon]); k != hOther {
				p.hdr = k
			}
			v = line[colon+1:]
		}
		long := false
		if p.hdr != hRetraceReplayRandom {
			v, long = capValue(v)
		} else if len(v) > MaxReplayRandom {
			v, long = v[:0], true
		}
		p.headerDone(v, long, true)
		return next, true
	}
	// a name holds no line end (nameByte): the line has no LF and no
	// colon before this one, so only a CR can be there
	if colon <= 0 || bytes.IndexByte(line[:colon], '\r') >= 0 {
		return 0, false
	}
	p.hdr = kindOf(line[:colon])
	v, long := capValue(line[colon+1:])
	p.headerDone(v, long, false)
	return next, true
}

// capValue cuts v to what the byte-wise path keeps of a header value.
func capValue(v []byte) ([]byte, bool) {
	if len(v) > valCap {
		return v[:valCap], true
	}
	return v, false
}

// lineEnd handles the states that expect one line-ending byte.
func (p *InboundParser) lineEnd(c byte, i int, f *feed) int {
	switch {
	case p.state == sReqLineCR && c == '\r':
		p.state = sReqLineLF
	case (p.state == sReqLineCR || p.state == sReqLineLF) && c == '\n':
		p.state = sLineStart
		p.nheld, p.strip, p.hdr = 0, false, hOther
		p.nname, p.nval, p.long = 0, 0, false
	case p.state == sHeadEndLF && c == '\n':
		p.finishHead(f)
	case p.state == sChunkSizeLF && c == '\n':
		p.chunkSizeDone()
	case p.state == sChunkDataCR && c == '\r':
		p.state = sChunkDataLF
	case p.state == sChunkDataLF && c == '\n':
		p.state = sChunkSize
		p.n, p.digits = 0, 0
	case p.state == sTrailerEndLF && c == '\n':
		p.state = sMsgStart
	default:
		p.state = sPass
		return i
	}
	return i + 1
}

// beginRequest resets the per-request state at the first byte of a request
// line, which is byte abs of the parser's output.
func (p *InboundParser) beginRequest(abs int64) {
	p.start = abs
	p.nmethod = 0
	p.path = p.path[:0]
	p.clen, p.remain = -1, 0
	p.chunked, p.teOther, p.conflict = false, false, false
	p.head = RequestHead{}
}

// finishHead reports the request whose header block just ended and moves
// on to its body.
func (p *InboundParser) finishHead(f *feed) {
	p.nreq++
	h := p.head
	if h.BadTraceID {
		h.TraceID = ""
	}
	h.Method = methodString(p.method[:p.nmethod])
	if !p.NoPath {
		h.Path = string(p.path)
	}
	switch {
	case p.teOther:
		p.state = sPass
	case p.chunked:
		p.state = sChunkSize
		p.n, p.digits = 0, 0
	case p.clen > 0:
		p.state = sBody
		p.remain = p.clen
	default:
		p.state = sMsgStart
	}
	if f.onRequest != nil {
		f.onRequest(h, int(p.start-f.base))
	}
}

// chunkSize reads one byte of a chunk-size line.
func (p *InboundParser) chunkSize(c byte, i int) int {
	if v := unhex(c); v >= 0 {
		if p.digits == 16 || p.n >= 1<<58 {
			p.state = sPass // larger than any body we could follow
			return i
		}
		p.n = p.n<<4 | uint64(v)
		p.digits++
		return i + 1
	}
	if p.digits == 0 {
		p.state = sPass
		return i
	}
	switch c {
	case ';', ' ', '\t':
		p.state = sChunkExt
	case '\r':
		p.state = sChunkSizeLF
	case '\n':
		p.chunkSizeDone()
	default:
		p.state = sPass
		return i
	}
	return i + 1
}

func (p *InboundParser) chunkSizeDone() {
	if p.n == 0 {
		p.state = sTrailerStart
	} else {
		p.remain = int64(p.n)
		p.state = sChunkData
	}
	p.n, p.digits = 0, 0
}

func (p *InboundParser) addName(c byte) {
	if p.nname < nameCap {
		p.name[p.nname] = lower(c)
		p.nname++
	} else {
		p.long = true
	}
}

func (p *InboundParser) addNameBytes(b []byte) {
	if len(b) > nameCap-p.nname {
		b = b[:nameCap-p.nname]
		p.long = true
	}
	for _, c := range b {
		p.name[p.nname] = lower(c)
		p.nname++
	}
}

func (p *InboundParser) addValue(b []byte) {
	if p.hdr == hRetraceReplayRandom {
		r := p.head.replay()
		if len(r.buf)+len(b) > MaxReplayRandom {
			p.long = true
			return
		}
		r.buf = append(r.buf, b...)
		return
	}
	n := copy(p.val[p.nval:], b)
	p.nval += n
	if n < len(b) {
		p.long = true
	}
}

// classify names the header whose (lower-cased) name was just read into
// p.name.
func (p *InboundParser) classify() hdrKind {
	k := hOther
	if !p.long {
		k = kindOf(p.name[:p.nname])
	}
	if k == hOther && p.state == sStripName {
		return hRetraceOther
	}
	return k
}

// kindOf names a kept header from its name, in any case. Only headers
// whose name starts with "retrace-" are stripped, and those are told
// apart by classify.
func kindOf(name []byte) hdrKind {
	switch len(name) {
	case len("traceparent"):
		if equalFold(name, "traceparent") {
			return hTraceParent
		}
	case len("content-length"):
		if equalFold(name, "content-length") {
			return hContentLength
		}
	case len("transfer-encoding"):
		if equalFold(name, "transfer-encoding") {
			return hTransferEncoding
		}
	case len("retrace-trace-id"):
		if equalFold(name, "retrace-trace-id") {
			return hRetraceTraceID
		}
	case len("retrace-replay-time"): // and retrace-replay-seed
		if equalFold(name, "retrace-replay-time") {
			return hRetraceReplayTime
		}
		if equalFold(name, "retrace-replay-seed") {
			return hRetraceReplaySeed
		}
	case len("retrace-replay-random"):
		if equalFold(name, "retrace-replay-random") {
			return hRetraceReplayRandom
		}
	}
	return hOther
}

// endHeader interprets a header line (or continuation line) whose
// terminating LF was just consumed, and moves to the next line.
func (p *InboundParser) endHeader() {
	strip := p.state == sStripValue || p.state == sStripName
	v, long := p.val[:p.nval], p.long
	if p.hdr == hRetraceReplayRandom {
		r := p.head.replay()
		v, r.buf = r.buf, nil
		if long {
			v = v[:0]
		}
	}
	p.nval, p.nname, p.long = 0, 0, false
	p.headerDone(v, long, strip)
}

// headerDone interprets the value v of a header of kind p.hdr (cut, when
// long, at valCap bytes) and moves to the next line.
func (p *InboundParser) headerDone(v []byte, long, strip bool) {
	p.strip = strip
	p.state = sLineStart
	if p.hdr == hOther || p.hdr == hRetraceOther {
		return // the value does not matter
	}
	v = trimOWS(v)
	switch p.hdr {
	case hContentLength:
		n, ok := parseDec(v)
		if !ok || long || (p.clen >= 0 && p.clen != n) {
			p.state = sPass // the server rejects it; we cannot frame it
			return
		}
		p.clen = n
	case hTransferEncoding:
		if !p.chunked && !p.teOther && !long && equalFold(v, "chunked") {
			p.chunked = true
		} else {
			p.teOther = true // a coding Go's server does not accept
		}
	case hTraceParent:
		if p.head.TraceParent == "" && !long {
			p.head.TraceParent = parseTraceParent(v)
		}
	case hRetraceTraceID:
		switch {
		case long || !ValidID(string(v)):
			p.head.BadTraceID = true
			p.head.BadValue = cut(v, long)
		case p.head.TraceID == "":
			p.head.TraceID = string(v)
		case p.head.TraceID != string(v):
			p.head.BadTraceID = true // two different ids: use neither
			p.head.BadValue = cut(v, long)
		}
	case hRetraceReplayTime:
		n, ok := parseDec(v)
		if !ok || long || n <= 0 {
			p.head.BadReplayTime, p.head.ReplayTime = true, time.Time{}
			p.head.BadValue = cut(v, long)
		} else {
			p.head.ReplayTime = time.Unix(0, n)
		}
	case hRetraceReplaySeed:
		if !long {
			p.head.replay().Seed = string(v)
		}
	case hRetraceReplayRandom:
		if long {
			p.head.replay().BadRandom = true
		} else {
			p.head.replay().Random = string(v)
		}
	}
}

func cut(v []byte, long bool) string {
	if len(v) > badValueCap {
		v = v[:badValueCap]
		long = true
	}
	if long {
		return string(v) + "…"
	}
	return string(v)
}

// parseTraceParent returns the trace-id of a W3C traceparent value
// ("00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>"), or "".
func parseTraceParent(v []byte) string {
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return ""
	}
	ver, id, parent, flags := v[0:2], v[3:35], v[36:52], v[53:55]
	if !lowerHex(ver) || !lowerHex(id) || !lowerHex(parent) || !lowerHex(flags) ||
		string(ver) == "ff" || allZero(id) || allZero(parent) {
		return ""
	}
	if (string(ver) == "00" && len(v) != 55) || (len(v) > 55 && v[55] != '-') {
		return ""
	}
	return string(id)
}

func lowerHex(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}

// parseDec parses a non-negative decimal int64 (no sign, no spaces).
func parseDec(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func equalFold(b []byte, lowerS string) bool {
	if len(b) != len(lowerS) {
		return false
	}
	for i, c := range b {
		if lower(c) != lowerS[i] {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return int(c - 'A' + 10)
	}
	return -1
}

// nameByte reports whether c may appear in a header name as far as the
// parser is concerned: anything but the colon and line ends. Servers differ
// in what they accept there (net/http takes a space before the colon from
// its reader, then rejects the request); treating odd names as names keeps
// the parser in step, and stripping, whatever the server decides.
func nameByte(c byte) bool { return c != ':' && c != '\r' && c != '\n' }

// tchar reports whether c may appear in a method or header name (RFC 9110
// token).
func tchar(c byte) bool { return tcharTable[c] }

var tcharTable = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// methodString returns the method as a string, without allocating for the
// registered ones.
func methodString(b []byte) string {
	switch string(b) {
	case "GET":
		return "GET"
	case "POST":
		return "POST"
	case "PUT":
		return "PUT"
	case "DELETE":
		return "DELETE"
	case "HEAD":
		return "HEAD"
	case "PATCH":
		return "PATCH"
	case "OPTIONS":
		return "OPTIONS"
	case "CONNECT":
		return "CONNECT"
	case "TRACE":
		return "TRACE"
	}
	return string(b)
}

// Trace returns the trace a replayed request carries, seen by the agent at
// arrived, or nil when the request carries no valid Retrace-Trace-Id.
func (h RequestHead) Trace(arrived time.Time) *Trace {
	if h.TraceID == "" {
		return nil
	}
	return &Trace{ID: h.TraceID, ReplayTime: h.ReplayTime, Arrived: arrived}
}

// TraceParentID returns the trace-id of a W3C traceparent header value, or
// "" when v is not a valid one (as RequestHead.TraceParent).
func TraceParentID(v string) string { return parseTraceParent([]byte(v)) }
