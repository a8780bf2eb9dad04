// Package postgres is PostgreSQL's frontend/backend protocol (version 3)
// for retrace (a wire.Protocol): which bytes open a PostgreSQL connection,
// where each message ends in either direction, which client messages set a
// connection up, how a recorded connection's messages pair into requests
// and answers, the statements and portals each connection names, typed
// decoding of parameters and rows, and the mock server's side: start-up
// and authentication answered itself, statements prepared on any recorded
// connection known on every live one, and an ErrorResponse for a missing
// mock.
//
// What capture runs on every write and read (Detect, the framers, the Tap)
// uses the standard library only; decoding messages for the mock server,
// the diff and the reports uses pgx's pgproto3, the message codec of the
// Go driver most services use (three small packages, no init). It parses
// untrusted bytes and never panics on them.
package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/retrace-dev/retrace/wire"
)

// Proto is the protocol's name in recordings (recording.Call.Proto).
const Proto = "postgres"

// Codes of the untyped packets a client may open a connection with: the
// protocol version of a StartupMessage, and the request codes of the
// others.
const (
	ProtocolVersion3  = 3 << 16  // 196608
	CancelRequestCode = 80877102 // 1234 << 16 | 5678
	SSLRequestCode    = 80877103 // 1234 << 16 | 5679
	GSSENCRequestCode = 80877104 // 1234 << 16 | 5680
)

// Types of the messages a client sends after its StartupMessage.
const (
	Bind         = 'B'
	Close        = 'C'
	CopyData     = 'd'
	CopyDone     = 'c'
	CopyFail     = 'f'
	Describe     = 'D'
	Execute      = 'E'
	Flush        = 'H'
	FunctionCall = 'F'
	Parse        = 'P'
	Password     = 'p' // PasswordMessage, SASLInitialResponse, SASLResponse, GSSResponse
	Query        = 'Q'
	Sync         = 'S'
	Terminate    = 'X'
)

// Types of the messages a server sends.
const (
	Authentication       = 'R'
	BackendKeyData       = 'K'
	BindComplete         = '2'
	CloseComplete        = '3'
	CommandComplete      = 'C'
	CopyInResponse       = 'G'
	CopyOutResponse      = 'H'
	CopyBothResponse     = 'W'
	DataRow              = 'D'
	EmptyQueryResponse   = 'I'
	ErrorResponse        = 'E'
	FunctionCallResponse = 'V'
	NegotiateProtocol    = 'v'
	NoData               = 'n'
	NoticeResponse       = 'N'
	NotificationResponse = 'A'
	ParameterDescription = 't'
	ParameterStatus      = 'S'
	ParseComplete        = '1'
	PortalSuspended      = 's'
	ReadyForQuery        = 'Z'
	RowDescription       = 'T'
)

// Limits of the protocol as servers enforce them.
const (
	// MaxStartup is the largest start-up packet a server accepts.
	MaxStartup = 10000
	// DefaultLimit bounds a message when the caller sets no limit: a
	// server refuses messages of 1 GB or more.
	DefaultLimit = 1 << 30
)

// Errors of the framers; they are wrapped with the message and offset
// they concern.
var (
	// ErrLength reports a length field the protocol does not allow.
	ErrLength = errors.New("postgres: bad message length")
	// ErrStartup reports an untyped packet that is no start-up packet.
	ErrStartup = errors.New("postgres: not a start-up packet")
)

// Message is one protocol message. Type is 0 for the untyped packets that
// open a connection (StartupMessage, SSLRequest, GSSENCRequest,
// CancelRequest), whose code is then Code; Body is what follows the
// length field and aliases the bytes the message was cut from.
type Message struct {
	Type byte
	Code uint32 // untyped packets: the version or request code
	Body []byte
}

// IsStartup reports whether m is a StartupMessage.
func (m Message) IsStartup() bool { return m.Type == 0 && m.Code>>16 == 3 }

// Detect tells, from the first bytes a client sent, whether the
// connection speaks PostgreSQL: a whole StartupMessage (protocol 3.x, its
// parameters NUL-terminated), SSLRequest, GSSENCRequest or CancelRequest.
func Detect(p []byte) wire.Verdict {
	if len(p) < 8 {
		// a length field below MaxStartup starts with two zero bytes
		for i, c := range p {
			if i < 2 && c != 0 {
				return wire.No
			}
		}
		return wire.NotYet
	}
	n := binary.BigEndian.Uint32(p)
	code := binary.BigEndian.Uint32(p[4:])
	switch {
	case code == SSLRequestCode || code == GSSENCRequestCode:
		return verdict(n == 8)
	case code == CancelRequestCode:
		if n != 16 {
			return wire.No
		}
	case code>>16 == 3:
		if n < 9 || n > MaxStartup {
			return wire.No
		}
		if len(p) >= int(n) && p[n-1] != 0 {
			return wire.No // parameters end with an empty name
		}
	default:
		return wire.No
	}
	if len(p) < int(n) {
		return wire.NotYet
	}
	return wire.Sure
}

func verdict(ok bool) wire.Verdict {
	if ok {
		return wire.Sure
	}
	return wire.No
}

// Next cuts the first message from b, a client's stream when frontend is
// true, else a server's. untyped says the next client message is a
// start-up packet (before the StartupMessage, or right after a refused
// SSLRequest or GSSENCRequest). n is 0, with a nil error, when b holds
// only part of a message. limit bounds a message's length (0:
// DefaultLimit).
func Next(b []byte, frontend, untyped bool, limit int) (m Message, n int, err error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	if frontend && untyped {
		if len(b) < 8 {
			return Message{}, 0, nil
		}
		l := binary.BigEndian.Uint32(b)
		if l < 8 || l > MaxStartup {
			return Message{}, 0, fmt.Errorf("%w: start-up packet of %d bytes", ErrLength, l)
		}
		code := binary.BigEndian.Uint32(b[4:])
		switch {
		case code == SSLRequestCode || code == GSSENCRequestCode:
			if l != 8 {
				return Message{}, 0, fmt.Errorf("%w: encryption request of %d bytes", ErrLength, l)
			}
		case code == CancelRequestCode:
			if l != 16 {
				return Message{}, 0, fmt.Errorf("%w: cancel request of %d bytes", ErrLength, l)
			}
		case code>>16 != 3:
			return Message{}, 0, fmt.Errorf("%w: code %d", ErrStartup, code)
		}
		if len(b) < int(l) {
			return Message{}, 0, nil
		}
		return Message{Code: code, Body: b[8:l]}, int(l), nil
	}
	if len(b) < 5 {
		return Message{}, 0, nil
	}
	l := binary.BigEndian.Uint32(b[1:])
	if l < 4 {
		return Message{}, 0, fmt.Errorf("%w: %q message of %d bytes", ErrLength, b[0], l)
	}
	if int64(l) > int64(limit) {
		return Message{}, 0, fmt.Errorf("%w: %q message of %d bytes, limit %d", wire.ErrTooLong, b[0], l, limit)
	}
	end := 1 + int(l)
	if len(b) < end {
		return Message{}, 0, nil
	}
	return Message{Type: b[0], Body: b[5:end]}, end, nil
}

// Messages cuts b, a client's stream if frontend, into whole messages and
// calls fn with each, stopping when fn returns false. It returns the bytes
// of whole messages consumed; an error reports a malformed message with
// its offset. untyped is as for Next, for the first message; it follows
// the stream from there (a StartupMessage ends the start-up packets; an
// SSLRequest or GSSENCRequest leaves the next message untyped).
func Messages(b []byte, frontend, untyped bool, fn func(Message) bool) (int, error) {
	off := 0
	for off < len(b) {
		m, n, err := Next(b[off:], frontend, untyped, 0)
		if err != nil {
			return off, fmt.Errorf("at byte %d: %w", off, err)
		}
		if n == 0 {
			return off, nil
		}
		off += n
		if frontend && untyped && m.IsStartup() {
			untyped = false
		}
		if !fn(m) {
			return off, nil
		}
	}
	return off, nil
}
