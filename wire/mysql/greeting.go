package mysql

import (
	"bytes"
	"encoding/binary"
)

// FindGreeting returns the payload of the server greeting (protocol version
// 10) at the start of b, a recorded server-to-client byte stream.
func FindGreeting(b []byte) ([]byte, bool) {
	p, seq, _, ok := NextPacket(b)
	if !ok || seq != 0 || len(p) < 1+1+4+8+1+2 || p[0] != 10 {
		return nil, false
	}
	if bytes.IndexByte(p[1:], 0) < 0 {
		return nil, false
	}
	return p, true
}

// Greeting returns a greeting packet built from a recorded greeting payload:
// the same server version, character set, status, capabilities (minus
// compression, which the mock server does not speak) and authentication
// plugin, with connection id connID. TLS stays offered when it was: a
// client that asks for it sends an SSL request, then goes on in plaintext
// (in replay mode the agent completes the client's TLS handshake without
// TLS), see IsSSLRequest.
func Greeting(recorded []byte, connID uint32) []byte {
	p := make([]byte, len(recorded))
	copy(p, recorded)
	v := bytes.IndexByte(p[1:], 0)
	i := 1 + v + 1 // after the NUL-terminated server version
	if i+4 <= len(p) {
		binary.LittleEndian.PutUint32(p[i:], connID)
	}
	capLow := i + 4 + 8 + 1
	if capLow+2 <= len(p) {
		c := binary.LittleEndian.Uint16(p[capLow:])
		c &^= uint16(CapCompress)
		binary.LittleEndian.PutUint16(p[capLow:], c)
	}
	return appendPacket(nil, 0, p)
}

// DefaultGreeting returns the greeting the mock server sends for a
// destination with no recorded greeting: a MySQL 8.0 server offering
// mysql_native_password and the usual protocol 4.1 capabilities.
func DefaultGreeting(connID uint32) []byte {
	const caps = 0x00000001 | 0x00000004 | 0x00000008 | 0x00000200 | 0x00002000 | 0x00008000 |
		0x00010000 | 0x00020000 | 0x00080000 | 0x00100000 | 0x00200000 | CapDeprecateEOF
	scramble := []byte("retrace-mock-scrambl") // 20 bytes; any value is accepted
	var p []byte
	p = append(p, 10)
	p = append(p, "8.0.36-retrace-mock"...)
	p = append(p, 0)
	p = binary.LittleEndian.AppendUint32(p, connID)
	p = append(p, scramble[:8]...)
	p = append(p, 0)
	p = binary.LittleEndian.AppendUint16(p, uint16(caps&0xffff))
	p = append(p, 45)                               // utf8mb4_general_ci
	p = binary.LittleEndian.AppendUint16(p, 0x0002) // autocommit
	p = binary.LittleEndian.AppendUint16(p, uint16(caps>>16))
	p = append(p, 21)
	p = append(p, make([]byte, 10)...)
	p = append(p, scramble[8:]...)
	p = append(p, 0)
	p = append(p, "mysql_native_password"...)
	p = append(p, 0)
	return appendPacket(nil, 0, p)
}

// IsSSLRequest reports whether payload, the client's first packet, is an
// SSL request: the first 32 bytes of a HandshakeResponse41 with CLIENT_SSL,
// after which the client starts TLS and sends its real response.
func IsSSLRequest(payload []byte) bool {
	return len(payload) == 32 && ClientCaps(payload)&CapSSL != 0
}

// ClientCaps returns the capability flags of a HandshakeResponse41 payload.
func ClientCaps(payload []byte) uint32 {
	if len(payload) < 4 {
		return 0
	}
	return binary.LittleEndian.Uint32(payload)
}
