package recording

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// SchemaVersion is the version of the JSONL schema written by this package
// (DESIGN.md 3.4). Readers accept sessions of this version and skip unknown
// fields.
const SchemaVersion = 1

// Protocols of recorded calls (Call.Proto) and inbound requests.
const (
	ProtoHTTP  = "http"
	ProtoRedis = "redis"
	ProtoMySQL = "mysql"
	ProtoRaw   = "raw" // any other protocol: one write burst and its answer
	// ProtoBackground is the Inbound.Proto of a background session
	// (Session.Background): it has no inbound request.
	ProtoBackground = "background"
)

// Session is one recorded inbound request and every downstream call it
// caused.
type Session struct {
	V  int    `json:"v"`
	ID string `json:"id"` // unique per recorded request
	// Trace is the W3C trace-id (32 lower-case hex digits) of the request's
	// traceparent header, "" without one. Requests of one distributed trace
	// share it; each is a session of its own with its own ID (schema v1,
	// added field: readers that do not know it skip it).
	Trace string `json:"trace,omitempty"`
	App   string `json:"app,omitempty"`
	// Background marks the application's start-up and background
	// traffic: calls of no inbound request (pool warm-up, start-up pings,
	// driver and ORM initialisation, health checks, background jobs),
	// recorded so that a replayed service can boot and answered to
	// untraced requests. Its Inbound is empty; replayers skip it.
	Background bool      `json:"background,omitempty"`
	At         time.Time `json:"at"`
	Inbound    Inbound   `json:"inbound"`
	Calls      []Call    `json:"calls"`
	// Random is what the request drew (RETRACE_RANDOM, DESIGN.md 14), nil
	// when the agent left its randomness alone.
	Random *Random `json:"random,omitempty"`
}

// Random is a recorded request's randomness: the seed its math/rand and
// math/rand/v2 draws came from and how many it made of each, and its
// crypto/rand draws in order (RETRACE_RANDOM=all). Replay hands them back
// (Retrace-Replay-Seed, Retrace-Replay-Random).
type Random struct {
	Seed   uint64 `json:"seed,string"` // a string in JSON: exact in any reader
	Math   uint64 `json:"math"`        // draws from math/rand's global source
	MathV2 uint64 `json:"math_v2"`     // draws from math/rand/v2's
	// Crypto holds the crypto/rand draws made on the request's goroutines
	// outside Go's crypto packages, base64 in JSON. They are what the
	// request generated: tokens, nonces, keys of its own.
	Crypto [][]byte `json:"crypto,omitempty"`
	// Masked reports that a masking rule ("random") removed the crypto
	// draws: a replay draws real randomness there.
	Masked bool `json:"masked,omitempty"`
}

// Inbound is the request the service received and the response it sent.
type Inbound struct {
	Proto    string // "http"
	Local    string // address the service listened on
	Remote   string // client address
	TLS      TLS    // the request came over TLS (HTTPS); Request is the plaintext
	Request  []byte // raw request bytes, as read by the application
	Response []byte // raw response bytes, as written by the application
	StartNs  int64  // offset from Session.At
	DurNs    int64
	// RequestTruncated and ResponseTruncated mark a payload cut at the
	// recorder's size cap; the bytes kept are a prefix of the original.
	RequestTruncated  bool
	ResponseTruncated bool
}

// Call is one downstream exchange: the bytes the service wrote to a
// destination and the bytes it read back in answer.
type Call struct {
	Seq               int    // order in which calls started, from 0
	Proto             string // "http", "redis", "mysql" or "raw"
	Dst               string // original destination, host:port
	Host              string // as dialled ("name:port") when by host name, Dst then its address; "" otherwise
	Setup             bool   // connection set-up traffic, answered per connection on replay
	Conn              int64  // optional: connection number within the recording process, 0 if unknown
	TLS               TLS    // the call went over TLS; Request and Response are the plaintext
	Request           []byte
	Response          []byte
	StartNs           int64 // offset from Session.At
	DurNs             int64
	RequestTruncated  bool
	ResponseTruncated bool
	// Decoded is optional: the request in its protocol's human-readable
	// form (MySQL commands with their statement and parameters), kept
	// when the request's bytes are not text, so that recordings stay
	// greppable. Readers that do not know it skip it; it is never matched.
	Decoded string
	// Note says in words what ended the call otherwise than by its answer
	// (an HTTP/2 stream reset: by which side, with which code; a stream
	// cut by GOAWAY or the connection's end). Schema v1, additive:
	// "call_note", omitted when empty.
	Note string
}

// TLS says how a connection was encrypted; the zero value is plain TCP.
// Schema v1 (additive): "tls":true, "server_name", "alpn", "tls_version",
// "cipher_suite", "curve" and "note", each omitted when empty.
type TLS struct {
	On         bool   // "tls": the bytes recorded are the plaintext of a TLS connection
	ServerName string // "server_name": SNI sent by the client
	ALPN       string // "alpn": the application protocol negotiated
	// What the handshake negotiated, by crypto/tls's names ("TLS 1.3",
	// "TLS_AES_128_GCM_SHA256", "X25519MLKEM768"): a replay hands them
	// back to the application in its ConnectionState.
	Version     string // "tls_version"
	CipherSuite string // "cipher_suite"
	Curve       string // "curve": the key exchange group, "" for none (TLS 1.2 RSA)
	// Note says, in words, what of the connection was not decoded (HTTP/2
	// negotiated through ALPN, recorded as raw bytes).
	Note string // "note"
}

// payloads on the wire: valid UTF-8 travels as a string, anything else as
// base64 in the *_b64 twin, so recordings stay readable and greppable.
type inboundJSON struct {
	Proto             string  `json:"proto"`
	Local             string  `json:"local,omitempty"`
	Remote            string  `json:"remote,omitempty"`
	TLS               bool    `json:"tls,omitempty"`
	ServerName        string  `json:"server_name,omitempty"`
	ALPN              string  `json:"alpn,omitempty"`
	TLSVersion        string  `json:"tls_version,omitempty"`
	CipherSuite       string  `json:"cipher_suite,omitempty"`
	Curve             string  `json:"curve,omitempty"`
	Note              string  `json:"note,omitempty"`
	Request           *string `json:"request,omitempty"`
	RequestB64        []byte  `json:"request_b64,omitempty"`
	Response          *string `json:"response,omitempty"`
	ResponseB64       []byte  `json:"response_b64,omitempty"`
	StartNs           int64   `json:"start_ns"`
	DurNs             int64   `json:"dur_ns"`
	RequestTruncated  bool    `json:"request_truncated,omitempty"`
	ResponseTruncated bool    `json:"response_truncated,omitempty"`
}

type callJSON struct {
	Seq               int     `json:"seq"`
	Proto             string  `json:"proto"`
	Dst               string  `json:"dst"`
	Host              string  `json:"host,omitempty"`
	Setup             bool    `json:"setup"`
	Conn              int64   `json:"conn,omitempty"`
	TLS               bool    `json:"tls,omitempty"`
	ServerName        string  `json:"server_name,omitempty"`
	ALPN              string  `json:"alpn,omitempty"`
	TLSVersion        string  `json:"tls_version,omitempty"`
	CipherSuite       string  `json:"cipher_suite,omitempty"`
	Curve             string  `json:"curve,omitempty"`
	Note              string  `json:"note,omitempty"`
	Request           *string `json:"request,omitempty"`
	RequestB64        []byte  `json:"request_b64,omitempty"`
	Response          *string `json:"response,omitempty"`
	ResponseB64       []byte  `json:"response_b64,omitempty"`
	Decoded           string  `json:"decoded,omitempty"`
	CallNote          string  `json:"call_note,omitempty"`
	StartNs           int64   `json:"start_ns"`
	DurNs             int64   `json:"dur_ns"`
	RequestTruncated  bool    `json:"request_truncated,omitempty"`
	ResponseTruncated bool    `json:"response_truncated,omitempty"`
}

func splitPayload(p []byte) (*string, []byte) {
	if p == nil {
		return nil, nil
	}
	if utf8.Valid(p) {
		s := string(p)
		return &s, nil
	}
	return nil, p // encoding/json writes []byte as base64
}

func joinPayload(s *string, b []byte) []byte {
	if s != nil {
		return []byte(*s)
	}
	return b
}

// MarshalJSON implements json.Marshaler with the payload rules of schema v1.
func (in Inbound) MarshalJSON() ([]byte, error) {
	j := inboundJSON{Proto: in.Proto, Local: in.Local, Remote: in.Remote, StartNs: in.StartNs, DurNs: in.DurNs,
		RequestTruncated: in.RequestTruncated, ResponseTruncated: in.ResponseTruncated,
		TLS: in.TLS.On, ServerName: in.TLS.ServerName, ALPN: in.TLS.ALPN, Note: in.TLS.Note,
		TLSVersion: in.TLS.Version, CipherSuite: in.TLS.CipherSuite, Curve: in.TLS.Curve}
	j.Request, j.RequestB64 = splitPayload(in.Request)
	j.Response, j.ResponseB64 = splitPayload(in.Response)
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler.
func (in *Inbound) UnmarshalJSON(b []byte) error {
	var j inboundJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*in = Inbound{Proto: j.Proto, Local: j.Local, Remote: j.Remote, StartNs: j.StartNs, DurNs: j.DurNs,
		Request: joinPayload(j.Request, j.RequestB64), Response: joinPayload(j.Response, j.ResponseB64),
		RequestTruncated: j.RequestTruncated, ResponseTruncated: j.ResponseTruncated,
		TLS: TLS{On: j.TLS, ServerName: j.ServerName, ALPN: j.ALPN, Note: j.Note,
			Version: j.TLSVersion, CipherSuite: j.CipherSuite, Curve: j.Curve}}
	return nil
}

// MarshalJSON implements json.Marshaler with the payload rules of schema v1.
func (c Call) MarshalJSON() ([]byte, error) {
	j := callJSON{Seq: c.Seq, Proto: c.Proto, Dst: c.Dst, Host: c.Host, Setup: c.Setup, Conn: c.Conn, StartNs: c.StartNs, DurNs: c.DurNs,
		RequestTruncated: c.RequestTruncated, ResponseTruncated: c.ResponseTruncated, Decoded: c.Decoded, CallNote: c.Note,
		TLS: c.TLS.On, ServerName: c.TLS.ServerName, ALPN: c.TLS.ALPN, Note: c.TLS.Note,
		TLSVersion: c.TLS.Version, CipherSuite: c.TLS.CipherSuite, Curve: c.TLS.Curve}
	j.Request, j.RequestB64 = splitPayload(c.Request)
	j.Response, j.ResponseB64 = splitPayload(c.Response)
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler.
func (c *Call) UnmarshalJSON(b []byte) error {
	var j callJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*c = Call{Seq: j.Seq, Proto: j.Proto, Dst: j.Dst, Host: j.Host, Setup: j.Setup, Conn: j.Conn, StartNs: j.StartNs, DurNs: j.DurNs,
		Request: joinPayload(j.Request, j.RequestB64), Response: joinPayload(j.Response, j.ResponseB64),
		RequestTruncated: j.RequestTruncated, ResponseTruncated: j.ResponseTruncated, Decoded: j.Decoded, Note: j.CallNote,
		TLS: TLS{On: j.TLS, ServerName: j.ServerName, ALPN: j.ALPN, Note: j.Note,
			Version: j.TLSVersion, CipherSuite: j.CipherSuite, Curve: j.Curve}}
	return nil
}

// Marshal encodes s as one JSONL line, without the trailing newline.
func Marshal(s *Session) ([]byte, error) {
	return AppendMarshal(nil, s)
}

// AppendMarshal appends the JSONL line of s (without newline) to b.
func AppendMarshal(b []byte, s *Session) ([]byte, error) {
	if out, ok := appendSession(b, s); ok {
		return out, nil
	}
	line, err := marshalSlow(s)
	if err != nil {
		return b, err
	}
	return append(b, line...), nil
}

// Unmarshal decodes one JSONL line. It rejects sessions of another schema
// version and sessions without an id.
func Unmarshal(line []byte) (*Session, error) {
	var s Session
	if err := json.Unmarshal(line, &s); err != nil {
		return nil, err
	}
	if s.V != SchemaVersion {
		return nil, fmt.Errorf("unsupported schema version %d (want %d)", s.V, SchemaVersion)
	}
	if s.ID == "" {
		return nil, fmt.Errorf("session has no id")
	}
	return &s, nil
}
