// Response framing: where an HTTP/1.x response ends in the bytes that
// carry it, as they are written or read in pieces of any size, without
// keeping its body. The agent uses it to tell the responses of pipelined
// requests apart on an accepted connection, and capture to end a session,
// or a downstream HTTP call, when its response is complete.

package http1

import (
	"bytes"
	"strconv"
	"strings"
)

// Response follows the bytes of one HTTP/1.x response as they are written
// or read and tells when the final response is complete, without keeping
// the body: heads are kept up to maxHead bytes, bodies only counted. Interim
// 1xx responses (except 101) are skipped. The zero value is ready for a
// response to anything but HEAD; it is not safe for concurrent use.
type Response struct {
	// NoBody is set for the answer to a HEAD request: its final response
	// ends with its head, whatever the head says of a body.
	NoBody bool

	state     frameState
	head      []byte
	remaining int64 // body bytes left (stBody) or of the current chunk (stChunkData)
	line      []byte
	interim   bool // a 1xx interim response has been seen
}

type frameState uint8

const (
	stHead frameState = iota
	stBody
	stChunkSize
	stChunkData
	stChunkCRLF
	stTrailer
	stUntilClose
	stDone
	stBroken // not HTTP as far as we can tell: ends with the connection
)

const maxHead = 64 << 10

// Done reports whether a complete final response has been seen.
func (f *Response) Done() bool { return f.state == stDone }

// AwaitingFinal reports whether only interim responses (100 Continue) have
// been seen: the request may still be sending its body.
func (f *Response) AwaitingFinal() bool { return f.interim && f.state == stHead && len(f.head) == 0 }

// Feed consumes p and reports whether the response is complete. Bytes after
// the end of the response are ignored.
func (f *Response) Feed(p []byte) bool {
	f.Take(p)
	return f.state == stDone
}

// Take consumes the bytes of p that belong to the response and returns how
// many they are: all of p, or the bytes up to the response's end when it
// ends inside p (Done is then true and the rest of p is the next message's).
// A response delimited by the connection's close, or bytes that are not
// HTTP, take all of p for ever.
func (f *Response) Take(p []byte) int {
	all := len(p)
	for len(p) > 0 {
		switch f.state {
		case stDone:
			return all - len(p)
		case stUntilClose, stBroken:
			return all
		case stHead:
			if len(f.head) == 0 {
				// the common case: the whole head in one piece, parsed
				// where it lies
				if end := headEnd(p); end > 0 {
					f.endHead(p[:end])
					p = p[end:]
					continue
				}
			}
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				f.head = append(f.head, p...)
				p = nil
				if len(f.head) > maxHead {
					f.state = stBroken
				}
				continue
			}
			f.head = append(f.head, p[:i+1]...)
			p = p[i+1:]
			if !bytes.HasSuffix(f.head, []byte("\n\r\n")) && !bytes.HasSuffix(f.head, []byte("\n\n")) {
				if len(f.head) > maxHead {
					f.state = stBroken
				}
				continue
			}
			head := f.head
			f.head = f.head[:0]
			f.endHead(head)
		case stBody, stChunkData:
			n := min(int64(len(p)), f.remaining)
			f.remaining -= n
			p = p[n:]
			switch {
			case f.remaining > 0:
			case f.state == stBody:
				f.state = stDone
			default:
				f.state = stChunkCRLF
			}
		case stChunkSize, stTrailer, stChunkCRLF:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				f.line = append(f.line, p...)
				p = nil
				if len(f.line) > 4096 {
					f.state = stBroken
				}
				continue
			}
			f.line = append(f.line, p[:i]...)
			p = p[i+1:]
			line := strings.TrimSpace(string(f.line))
			f.line = f.line[:0]
			switch f.state {
			case stChunkCRLF:
				f.state = stChunkSize
			case stTrailer:
				if line == "" {
					f.state = stDone
				}
			case stChunkSize:
				size, _, _ := strings.Cut(line, ";")
				n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
				switch {
				case err != nil || n < 0:
					f.state = stBroken
				case n == 0:
					f.state = stTrailer
				default:
					f.remaining, f.state = n, stChunkData
				}
			}
		}
	}
	return all
}

// headEnd returns the length of the head at the start of p — up to and
// including the first empty line — or 0 when p does not hold all of it.
func headEnd(p []byte) int {
	// line by line, so the body after the head is never scanned
	for off := 0; ; {
		i := bytes.IndexByte(p[off:], '\n')
		if i < 0 {
			return 0
		}
		off += i + 1
		switch {
		case off < len(p) && p[off] == '\n':
			return off + 1
		case off+1 < len(p) && p[off] == '\r' && p[off+1] == '\n':
			return off + 2
		}
	}
}

// endHead decides how the body of the response whose head is head is
// framed (RFC 9112 section 6.3). It does not allocate.
func (f *Response) endHead(head []byte) {
	if len(bytes.TrimSpace(head)) == 0 {
		return // stray CRLF between messages
	}
	status, rest, _ := bytes.Cut(head, []byte("\n"))
	proto, status, _ := bytes.Cut(bytes.TrimSpace(status), []byte(" "))
	codeB, _, _ := bytes.Cut(bytes.TrimLeft(status, " "), []byte(" "))
	code, ok := atoi(codeB)
	if !bytes.HasPrefix(proto, []byte("HTTP/")) || !ok {
		f.state = stBroken
		return
	}
	switch {
	case code == 101:
		f.state = stDone // switched protocols: what follows is not HTTP
		return
	case code >= 100 && code < 200:
		f.interim = true
		return // interim: the final response follows
	case code == 204 || code == 304 || f.NoBody:
		f.state = stDone
		return
	}
	cl, chunked := int64(-1), false
	for len(rest) > 0 {
		line := rest
		rest = nil
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line, rest = line[:i], line[i+1:]
		}
		if !mayFrame(line) {
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		name = bytes.TrimSpace(name)
		switch { // lengths first: most lines are neither
		case len(name) == len("content-length") && bytes.EqualFold(name, []byte("content-length")):
			if n, ok := atoi(bytes.TrimSpace(value)); ok {
				cl = n
			}
		case len(name) == len("transfer-encoding") && bytes.EqualFold(name, []byte("transfer-encoding")):
			value = bytes.TrimSpace(value)
			chunked = len(value) >= 7 && bytes.EqualFold(value[len(value)-7:], []byte("chunked"))
		}
	}
	switch {
	case chunked:
		f.state = stChunkSize
	case cl == 0:
		f.state = stDone
	case cl > 0:
		f.state, f.remaining = stBody, cl
	default:
		f.state = stUntilClose
	}
}

// mayFrame reports whether line may name Content-Length or
// Transfer-Encoding, as endHead reads it: past the ASCII white space that
// bytes.TrimSpace removes, it starts with C or T in either case, or with a
// byte from 0x80 (TrimSpace removes Unicode white space too; endHead then
// decides). Most lines of a head are settled by this look at one byte.
func mayFrame(line []byte) bool {
	for _, c := range line {
		switch c {
		case ' ', '\t', '\n', '\v', '\f', '\r':
			continue
		}
		return c|0x20 == 'c' || c|0x20 == 't' || c >= 0x80
	}
	return false
}

// atoi parses a non-negative decimal number of at most 18 digits.
func atoi(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
