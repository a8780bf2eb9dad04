package wire

import "errors"

// Side is the party of a connection whose bytes are meant: the client
// (which dialled) or the server.
type Side uint8

const (
	Client Side = iota
	Server
)

func (s Side) String() string {
	if s == Server {
		return "server"
	}
	return "client"
}

// Verdict is a protocol's answer to "are these bytes mine?".
type Verdict uint8

const (
	// No: the bytes are not this protocol (or not of the part of it the
	// package handles).
	No Verdict = iota
	// NotYet: the bytes so far could start this protocol; more bytes (from
	// either side) will tell.
	NotYet
	// Sure: the bytes are this protocol.
	Sure
)

func (v Verdict) String() string {
	switch v {
	case Sure:
		return "sure"
	case NotYet:
		return "not yet"
	}
	return "no"
}

// ErrTooLong reports a message longer than the limit its framer or
// answerer was given.
var ErrTooLong = errors.New("message exceeds the size limit")

// Protocol is one wire protocol. Implementations are stateless values,
// safe for concurrent use; see the package doc for what each method is
// for.
type Protocol interface {
	// Name is the protocol's name in recordings (recording.Call.Proto):
	// "http", "redis", "mysql", "raw", "postgres", … Lower case, stable.
	Name() string

	// Detect tells whether a connection speaks the protocol from the
	// first bytes each side sent: client and server hold everything that
	// side has sent since the connection opened, up to DetectBound bytes
	// each (either may be empty; the server's bytes come first for a
	// protocol whose server speaks first). It is called again with longer
	// inputs while any protocol says NotYet, so it must decide from what
	// it is given and never guess: Sure only when no other protocol's
	// traffic could look like that. A protocol whose server speaks first
	// says No when the client has sent bytes and the server none; one
	// whose client speaks first says No when the server spoke first.
	Detect(client, server []byte) Verdict

	// NewFramer returns a framer of the messages one side sends, for one
	// connection.
	NewFramer(side Side, limit int) Framer

	// NewTap returns capture's state for one connection (see Tap).
	NewTap() Tap

	// NewBook returns an empty book of what the recordings say about one
	// destination (see Book).
	NewBook() Book

	// NewSession returns the state that reads one recording's calls to one
	// destination into answerable units, given that destination's book.
	NewSession(b Book) Session

	// NewAnswerer returns the mock server's state for one live connection
	// to a destination of this protocol.
	NewAnswerer(env Env) Answerer

	// Decode returns a human-readable form of one message (or of a burst
	// of whole messages, as a recorded call holds them) sent by side, and
	// false when msg does not parse: callers then show the bytes.
	Decode(side Side, msg []byte) (Decoded, bool)
}

// Framer cuts the byte stream of one direction of one connection into
// messages. It is fed nothing: the caller keeps the buffer and asks Next
// about its start, as bytes arrive, in any split.
type Framer interface {
	// Next returns the length of the whole message at the start of buf,
	// or 0 when buf holds only the start of one (or nothing). It returns
	// an error, naming the message and what is wrong, when buf cannot be
	// the protocol (the connection is then beyond framing), and one
	// wrapping ErrTooLong when the message will not fit the limit the
	// framer was made with. A message found is consumed: the next call
	// asks about the bytes after it.
	Next(buf []byte) (n int, err error)
	// Request tells a server-side framer of a whole request the client
	// sent, in order, before the answer to it is framed (HTTP: the answer
	// to HEAD has no body). Client-side framers, and server-side framers of
	// protocols that do not need it, ignore it.
	Request(msg []byte)
}

// Tap is what capture asks a protocol about one connection it records.
// Capture calls it under the connection's lock, in the order the bytes
// were written and read. A Tap is made when the connection's protocol is
// decided; when client bytes came before that (Detector.Client), capture
// first passes them to Write as one write with begins true, so that the
// Tap's state follows the call in progress (that call is filed already:
// the Filing is not applied to it).
type Tap interface {
	// Write files client bytes p, written on a goroutine of trace tid
	// ("" for none). begins says capture would start a new call with them:
	// there is no current call, it has had answer bytes, or it is of
	// another trace; the Filing may say they continue the current call
	// instead (Continue), or that a call begun is set-up or not followed.
	// When begins is false the bytes go on with the current call whatever
	// the Filing says but its Trace.
	Write(p []byte, tid string, begins bool) Filing
	// Read tells whether server bytes p belong to the answer of the
	// current call. false: that answer was already complete, and p
	// answers a request not reported yet (net/http reads on another
	// goroutine than it writes): capture keeps p for the next call.
	Read(p []byte) bool
	// ReadsOnWriter reports that the protocol's clients read each answer
	// on the goroutine that wrote the request (database drivers, Redis
	// clients): an answer read on a goroutine of another trace answers a
	// request that was not reported, and is dropped. HTTP clients read on
	// their own goroutine and return false.
	ReadsOnWriter() bool
}

// Filing is how capture files a client write (see Tap.Write).
type Filing struct {
	// Trace is the trace the bytes belong to: the writer's, unless the
	// protocol knows better (a MySQL COM_STMT_CLOSE of a statement another
	// request prepared belongs to that request).
	Trace string
	// Continue: the bytes continue the current call of the same trace
	// although it had an answer (an HTTP request body sent after "100
	// Continue").
	Continue bool
	// Setup: when the bytes start a call, that call is connection set-up
	// (DESIGN.md 3.4), answered per connection on replay.
	Setup bool
	// Skip: the bytes start an exchange capture need not follow at all
	// (HTTP of no trace: its answer is read before the next request is
	// written, so nothing of it can be attributed to a trace).
	Skip bool
}

// NoBook is the Book of a protocol that needs nothing destination-wide
// (its client speaks first and every request is answered on its own).
type NoBook struct{}

func (NoBook) Learn(Call)                            {}
func (NoBook) Greeting(uint32) []byte                { return nil }
func (NoBook) Fallback(*Request) ([]byte, int, bool) { return nil, 0, false }

// Call is a recorded downstream call as a protocol sees it.
type Call struct {
	Request, Response []byte
	Setup             bool
	Conn              int64 // recorded connection id, distinct per connection of a session
	Seq               int
}

// Book is what every loaded recording says about one destination. The mock
// server calls Learn with each recorded call to the destination, of every
// session it loads, under its index's write lock; afterwards the other
// methods are called concurrently and must only read.
type Book interface {
	Learn(c Call)
	// Greeting returns the bytes a server that speaks first sends when a
	// connection opens (MySQL), nil for a protocol whose client speaks
	// first. connID is distinct per live connection.
	Greeting(connID uint32) []byte
	// Fallback answers a request that the trace's recording cannot, from
	// any recording of the destination (a MySQL statement prepared again
	// on another connection); false if none. The answer goes through the
	// connection's Answerer.Reply like any recorded one.
	Fallback(r *Request) (resp []byte, seq int, ok bool)
}

// Session reads one recording's calls to one destination, in recorded
// order, into units (protocol state across calls, such as which statement
// each recorded statement id was prepared from, lives here).
type Session interface {
	// Units returns the answerable pieces of one call: one unit per call,
	// or one per command of a pipeline whose answers pair with its
	// commands. It is called for every call, set-up calls included, in
	// recorded order; a call that does not parse is one unit whose
	// Request has Op "?".
	Units(c Call) []Unit
}

// Unit is one answerable piece of a recorded call.
type Unit struct {
	Req  Request
	Resp []byte
}

// Env is what an Answerer gets from the mock server.
type Env struct {
	// Book of the connection's destination (never nil).
	Book Book
	// MaxMessage bounds one request's bytes.
	MaxMessage int
	// TraceID returns the trace of the request being assembled on the
	// connection (the frames' tid), "" for none.
	TraceID func() string
	// ConnID is distinct per live connection (MySQL connection id).
	ConnID uint32
}

// Answerer is the mock server's protocol state for one live connection.
type Answerer interface {
	// Greeting is sent right after the connection's preamble; nil for
	// none.
	Greeting() []byte
	// Next parses the request at the start of buf. n == 0 with a nil error
	// means more bytes are needed; interim, when not nil, is sent at once
	// (HTTP "100 Continue"). An error (wrapping ErrTooLong when the
	// request exceeds Env.MaxMessage) ends the connection. The Request's
	// slices may alias buf and live until the next call.
	Next(buf []byte) (r Request, n int, interim []byte, err error)
	// Reply turns the recorded answer to r into the bytes to send on this
	// connection (MySQL: its sequence ids, its statement ids).
	Reply(r *Request, resp []byte) []byte
	// Synth answers a request the protocol answers itself (r.Local), or a
	// set-up request no recording answered.
	Synth(r *Request) []byte
	// Missing is the protocol's error answer for a request no recording
	// answered; nil for a protocol without one (the mock server then
	// closes the connection).
	Missing(r *Request, reason string) []byte
	// AnswerLen frames an answer from the real destination to r, when the
	// mock server proxies an untraced request: the length of the whole
	// answer at the start of b, 0 for more bytes, -1 for an answer that
	// runs until the connection closes. Protocols that cannot be proxied
	// one request at a time return an error.
	AnswerLen(r *Request, b []byte) (int, error)
}

// Canceller is an Answerer some of whose recorded answers came back only
// because the client cancelled its request from another connection
// (PostgreSQL's CancelRequest): the mock server holds such an answer until
// the live client cancels too (at most a bound longer than the recorded
// call took).
type Canceller interface {
	// AwaitCancel reports whether the answer Reply returned last waits
	// for the client's cancel; cancelled is then closed when it arrives,
	// head leading bytes of the answer are sent before the wait (what the
	// server sent before it was cancelled), and done must be called once
	// the wait is over.
	AwaitCancel() (cancelled <-chan struct{}, head int, done func(), ok bool)
}

// Request is what matching knows of one request, live or recorded: the
// same features are computed for both sides so strategies compare like
// with like. Slices alias the bytes the request was parsed from.
type Request struct {
	Raw     []byte   // exact bytes
	Op      string   // identity: "GET /users/*", "SET", normalised SQL, "" for raw
	Key     string   // HTTP target, Redis key, SQL text
	Canon   []byte   // what Hamming distance compares
	Body    []byte   // what the JSON strategy compares
	Args    [][]byte // Redis arguments after the key; SQL literals or parameters
	Setup   bool     // connection set-up, answered from any recording of the destination
	Local   bool     // answered by the Answerer itself (Synth): MySQL authentication
	Quit    bool     // the client ends the connection after this request
	NoReply bool     // the protocol sends nothing back (COM_STMT_CLOSE)
	Method  string   // HTTP method, for proxying
	Owner   string   // trace the request belongs to when not its writer's (MySQL COM_STMT_CLOSE)
	Stmt    string   // statement command: the SQL the statement was prepared with, when known
	// Prepare: answering this request defines a statement the connection's
	// later requests refer to (MySQL COM_STMT_PREPARE); when the trace's
	// recording has no answer, Book.Fallback is asked.
	Prepare bool
}

// Comparer is implemented by a protocol whose client messages the
// downstream diff compares in a form of their own rather than Decode's:
// the same paths, but two spellings of one request made alike (SQL white
// space), what belongs to the connection left out (statement ids and
// names), messages that carry nothing to compare (a statement close)
// dropped, bodies without their transfer and content codings. Protocols
// without it are compared by Decode's fields.
type Comparer interface {
	// CompareForm returns the fields the diff compares of a client
	// message (or burst of whole messages), false when msg does not parse.
	// A form without fields carries nothing to compare: a recorded call
	// like that which a replay never made is no difference.
	CompareForm(msg []byte) (Decoded, bool)
}

// Decoded is a human-readable form of a message.
type Decoded struct {
	// Text is one line (or a few) a person reads: "SET cart:7 3",
	// "EXECUTE SELECT * FROM t WHERE id = ? [42]", "POST /orders HTTP/1.1 …".
	Text string
	// Fields are the message's parts by path, in order, with the paths
	// the downstream diff reports (replayer/diff.CompareCalls): "args[1]",
	// "sql", "params[0]", "method", "target", "body.id", … A report
	// highlights the field a difference names.
	Fields []Field
}

// Field is one named part of a decoded message.
type Field struct {
	Path  string
	Value string
}
