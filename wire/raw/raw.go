// Package raw is the protocol of connections no other protocol is sure of
// (wire.Protocol "raw"): a client write burst is one request and what the
// server sends until the next is its answer; matching compares whole
// payloads; a missing mock has no error message, so the mock server closes
// the connection.
package raw

import (
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/wire"
)

// Name is the protocol's name in recordings.
const Name = "raw"

// Protocol is the fallback wire.Protocol.
var Protocol wire.Protocol = protocol{}

type protocol struct{}

func (protocol) Name() string { return Name }

// Detect is never sure: raw is what is left when no protocol is.
func (protocol) Detect(_, _ []byte) wire.Verdict { return wire.No }

func (protocol) NewFramer(wire.Side, int) wire.Framer { return framer{} }

// framer: whatever has arrived is one message (the protocol's own
// boundaries are unknown, and a raw protocol's peer may wait for an
// answer before it sends more).
type framer struct{}

func (framer) Next(buf []byte) (int, error) { return len(buf), nil }
func (framer) Request([]byte)               {}

func (protocol) NewTap() wire.Tap { return tap{} }

type tap struct{}

func (tap) Write(_ []byte, tid string, _ bool) wire.Filing { return wire.Filing{Trace: tid} }
func (tap) Read([]byte) bool                               { return true }
func (tap) ReadsOnWriter() bool                            { return true }

func (protocol) NewBook() wire.Book { return wire.NoBook{} }

func (protocol) NewSession(wire.Book) wire.Session { return session{} }

type session struct{}

func (session) Units(c wire.Call) []wire.Unit {
	return []wire.Unit{{Req: Features(c.Request), Resp: c.Response}}
}

// Features: whole payloads are compared.
func Features(msg []byte) wire.Request { return wire.Request{Raw: msg, Canon: msg, Body: msg} }

func (protocol) NewAnswerer(wire.Env) wire.Answerer { return answerer{} }

type answerer struct{}

func (answerer) Greeting() []byte { return nil }
func (answerer) Next(buf []byte) (wire.Request, int, []byte, error) {
	return Features(buf), len(buf), nil, nil
}
func (answerer) Reply(_ *wire.Request, resp []byte) []byte { return resp }
func (answerer) Synth(*wire.Request) []byte                { return nil }
func (answerer) Missing(*wire.Request, string) []byte      { return nil }
func (answerer) AnswerLen(*wire.Request, []byte) (int, error) {
	return 0, errors.New("raw requests cannot be proxied one by one (pass the destination through instead)")
}

// Decode shows text as it is (quoted when it holds control bytes other
// than line ends and tabs); bytes that are not UTF-8 do not decode.
func (protocol) Decode(_ wire.Side, msg []byte) (wire.Decoded, bool) {
	if !utf8.Valid(msg) || len(msg) == 0 {
		return wire.Decoded{}, false
	}
	s := string(msg)
	for _, r := range s {
		if r < ' ' && r != '\n' && r != '\r' && r != '\t' {
			s = strconv.Quote(s)
			break
		}
	}
	return wire.Decoded{Text: s, Fields: []wire.Field{{Path: "bytes", Value: s}}}, true
}
