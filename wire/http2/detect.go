package http2

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http2/hpack"
)

// Verdict is what the first bytes of a connection say about its protocol.
type Verdict uint8

const (
	// NotYet: the bytes so far fit, more are needed to decide.
	NotYet Verdict = iota
	// Sure: the connection speaks HTTP/2.
	Sure
	// No: the connection does not start as HTTP/2 with prior knowledge.
	No
)

func (v Verdict) String() string {
	return [...]string{"not yet", "sure", "no"}[v]
}

// Detect decides from a client's first bytes whether it speaks HTTP/2 with
// prior knowledge (h2c, or h2 after ALPN): the bytes must start with the
// 24-byte client preface. An h2c Upgrade starts as HTTP/1.1; see
// UpgradeRequest.
func Detect(client []byte) Verdict {
	n := min(len(client), len(ClientPreface))
	if string(client[:n]) != ClientPreface[:n] {
		return No
	}
	if n < len(ClientPreface) {
		return NotYet
	}
	return Sure
}

// UpgradeRequest returns, for the head of an HTTP/1.1 request that asks to
// switch to h2c (Upgrade: h2c with an HTTP2-Settings header), the request
// as stream 1's header block; ok is false for any other request. head must
// be a whole request head, through its blank line.
func UpgradeRequest(head []byte) (m Message, ok bool, err error) {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return Message{}, false, fmt.Errorf("http2: h2c upgrade request head: %w", err)
	}
	if !hasToken(req.Header.Values("Upgrade"), "h2c") || req.Header.Get("HTTP2-Settings") == "" {
		return Message{}, false, nil
	}
	f := []hpack.HeaderField{
		{Name: ":method", Value: req.Method},
		{Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: req.Host},
		{Name: ":path", Value: req.RequestURI},
	}
	for k, vs := range req.Header {
		lk := strings.ToLower(k)
		switch lk {
		case "host", "connection", "upgrade", "http2-settings", "keep-alive", "proxy-connection", "transfer-encoding":
			continue
		}
		for _, v := range vs {
			f = append(f, hpack.HeaderField{Name: lk, Value: v})
		}
	}
	return Message{Header: f}, true, nil
}

// SwitchingProtocols returns the length of an HTTP/1.1 101 response that
// starts resp and switches to h2c, 0 while its head is incomplete, and -1
// when resp starts with anything else (the server declined the upgrade).
func SwitchingProtocols(resp []byte) int {
	const status = "HTTP/1.1 101"
	n := min(len(resp), len(status))
	if string(resp[:n]) != status[:n] {
		return -1
	}
	end := bytes.Index(resp, []byte("\r\n\r\n"))
	if end < 0 {
		return 0
	}
	return end + 4
}

func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
