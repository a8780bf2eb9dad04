// Packet framing, OK and error packets, prepared-statement ids.

package mysql

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Command bytes of the command phase.
const (
	ComQuit             = 0x01
	ComInitDB           = 0x02
	ComQuery            = 0x03
	ComFieldList        = 0x04
	ComStatistics       = 0x09
	ComPing             = 0x0e
	ComChangeUser       = 0x11
	ComStmtPrepare      = 0x16
	ComStmtExecute      = 0x17
	ComStmtSendLongData = 0x18
	ComStmtClose        = 0x19
	ComStmtReset        = 0x1a
	ComSetOption        = 0x1b
	ComResetConnection  = 0x1f
)

// Capability flags the mock server clears from a recorded greeting: it
// speaks neither TLS nor the compressed protocol.
const (
	CapCompress     = 0x00000020
	CapSSL          = 0x00000800
	CapProtocol41   = 0x00000200
	CapDeprecateEOF = 0x01000000
)

// maxPacket is the largest payload of one packet; a message of that size or
// more continues in the next packet.
const maxPacket = 0xffffff

// ErrTooLarge reports a message longer than the caller's limit.
var ErrTooLarge = errors.New("mysql: message exceeds limit")

// NextPacket returns the first packet in b: its payload, sequence id and the
// bytes it occupies. ok is false when b holds only part of a packet.
func NextPacket(b []byte) (payload []byte, seq byte, n int, ok bool) {
	if len(b) < 4 {
		return nil, 0, 0, false
	}
	l := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
	if len(b) < 4+l {
		return nil, 0, 0, false
	}
	return b[4 : 4+l], b[3], 4 + l, true
}

// NextMessage returns the first message in b: the payload of a packet, or of
// a run of full-size packets and the shorter one that ends it. n is 0 when
// the message is not complete yet. Multi-packet payloads are joined in a
// fresh slice; a single packet's payload aliases b.
func NextMessage(b []byte, limit int) (payload []byte, lastSeq byte, n int, err error) {
	for {
		p, seq, m, ok := NextPacket(b[n:])
		if !ok {
			if rest := b[n:]; len(rest) >= 4 {
				if l := int(rest[0]) | int(rest[1])<<8 | int(rest[2])<<16; len(payload)+l > limit {
					return nil, 0, 0, fmt.Errorf("%w: packet of %d bytes", ErrTooLarge, l)
				}
			}
			return nil, 0, 0, nil
		}
		if n == 0 && len(p) < maxPacket {
			return p, seq, m, nil
		}
		if len(payload)+len(p) > limit {
			return nil, 0, 0, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(payload)+len(p))
		}
		payload = append(payload, p...)
		n += m
		lastSeq = seq
		if len(p) < maxPacket {
			return payload, lastSeq, n, nil
		}
	}
}

// appendPacket appends one packet with payload p and sequence id seq.
func appendPacket(dst []byte, seq byte, p []byte) []byte {
	l := len(p)
	dst = append(dst, byte(l), byte(l>>8), byte(l>>16), seq)
	return append(dst, p...)
}

// Resequence returns a copy of the packets in resp with their sequence ids
// renumbered from first, as the client expects after a request whose last
// packet had id first-1. Trailing bytes that are not a whole packet are kept
// as they are.
func Resequence(resp []byte, first byte) []byte {
	out := make([]byte, len(resp))
	copy(out, resp)
	seq := first
	for i := 0; ; {
		_, _, n, ok := NextPacket(out[i:])
		if !ok {
			return out
		}
		out[i+3] = seq
		seq++
		i += n
	}
}

// OK returns an OK packet with sequence id seq.
func OK(seq byte) []byte {
	// header, affected rows 0, last insert id 0, status SERVER_STATUS_AUTOCOMMIT, warnings 0
	return appendPacket(nil, seq, []byte{0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00})
}

// Err returns an error packet (protocol 4.1 layout) with sequence id seq.
func Err(seq byte, code uint16, state, msg string) []byte {
	if len(state) != 5 {
		state = "HY000"
	}
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	p := make([]byte, 0, 9+len(msg))
	p = append(p, 0xff, byte(code), byte(code>>8), '#')
	p = append(p, state...)
	p = append(p, msg...)
	return appendPacket(nil, seq, p)
}

// StmtID returns the statement id of a COM_STMT_PREPARE_OK response.
func StmtID(resp []byte) (uint32, bool) {
	p, _, _, ok := NextPacket(resp)
	if !ok || len(p) < 12 || p[0] != 0x00 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(p[1:5]), true
}

// WithStmtID returns a copy of a COM_STMT_PREPARE_OK response carrying
// statement id id instead of the recorded one.
func WithStmtID(resp []byte, id uint32) []byte {
	out := make([]byte, len(resp))
	copy(out, resp)
	if _, ok := StmtID(out); ok {
		binary.LittleEndian.PutUint32(out[5:9], id)
	}
	return out
}

// RequestStmtID returns the statement id that a COM_STMT_EXECUTE, _CLOSE,
// _RESET or _SEND_LONG_DATA payload names.
func RequestStmtID(payload []byte) (uint32, bool) {
	if len(payload) < 5 {
		return 0, false
	}
	switch payload[0] {
	case ComStmtExecute, ComStmtClose, ComStmtReset, ComStmtSendLongData:
		return binary.LittleEndian.Uint32(payload[1:5]), true
	}
	return 0, false
}
