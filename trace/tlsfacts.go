package trace

// TLSDst is the destination a replaying agent names, in the preamble of a
// connection of its own to the mock server, to ask what the recordings
// say a destination's TLS handshakes negotiated (DESIGN.md 3.3): the agent
// completes a redirected client's handshake without TLS and gives the
// application the recorded ConnectionState. Each frame on it carries the
// asking goroutine's trace id (or none) and one TLSQuery as JSON; the mock
// server answers each frame with one TLSAnswer as a JSON line. A mock
// server that does not know TLSDst closes the connection (a raw
// connection with no recording), and the agent falls back to a plausible
// state of its own.
const TLSDst = "retrace:tls"

// TLSQuery asks for the recorded TLS facts of one destination.
type TLSQuery struct {
	Dst        string   `json:"dst"`                   // host:port as the connection's frames name it
	ServerName string   `json:"server_name,omitempty"` // the name the client's config gives (its SNI)
	ALPN       []string `json:"alpn,omitempty"`        // the protocols the client offers, in its order
}

// TLSFacts is one combination of handshake results the recordings hold
// for a destination, with crypto/tls's names as recordings spell them
// (recording.TLS).
type TLSFacts struct {
	ServerName  string `json:"server_name,omitempty"`
	ALPN        string `json:"alpn,omitempty"`
	Version     string `json:"tls_version,omitempty"`
	CipherSuite string `json:"cipher_suite,omitempty"`
	Curve       string `json:"curve,omitempty"`
	Calls       int    `json:"calls"` // recorded calls that saw this combination
}

// TLSAnswer is the mock server's answer to a TLSQuery: the recorded
// destination that answers the queried one and its facts, best fit to the
// query first (its server name, then an ALPN the client offers, then the
// most calls); no facts and a reason when the recordings hold none.
type TLSAnswer struct {
	Recorded string     `json:"recorded,omitempty"`
	Facts    []TLSFacts `json:"facts,omitempty"`
	Reason   string     `json:"reason,omitempty"`
}
