package load

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retrace-dev/retrace/internal/lines"
	"github.com/retrace-dev/retrace/recording"
)

// FormatVersion is the version of the timed-request JSONL format written by
// this package (FORMAT.md). Readers accept lines of this version, and lines
// without "v" (hand-written inputs); they skip unknown fields.
const FormatVersion = 1

// Request kinds: what executes a request.
const (
	KindHTTP = "http" // Method, URL, Header, Body
	KindSQL  = "sql"  // Query, Args
	// KindGRPC (grpc.go): URL is the method path, Header the metadata,
	// Body the length-prefixed request messages.
)

// Request is one timed request: one line of the timed-request JSONL.
type Request struct {
	// At is when the request happened in production; pacing in original
	// mode replays the gaps between these times.
	At time.Time
	// API names the group the request is counted in (per-API statistics).
	// Empty means [DefaultAPI] of the request.
	API string
	// ID identifies the source of the request (a trace id, "file:line").
	ID string
	// Kind is KindHTTP or KindSQL; empty is read as KindHTTP when URL is
	// set and KindSQL when Query is set.
	Kind   string
	Method string
	URL    string // absolute, or a request URI ("/path?query") resolved against the target
	Header http.Header
	Body   []byte
	Query  string // SQL text
	Args   []any  // SQL arguments (JSON numbers, strings, booleans, null)
	// Meta carries extra fields extracted from the source (log fields chosen
	// with --meta), for templates in the prepare step.
	Meta map[string]string
}

// wireRequest is the JSON form of a Request and, with the outcome fields, of
// a line of errors.jsonl (which is therefore a valid load input).
type wireRequest struct {
	V       int               `json:"v"`
	At      time.Time         `json:"at"`
	API     string            `json:"api,omitempty"`
	ID      string            `json:"id,omitempty"`
	Kind    string            `json:"kind,omitempty"`
	Method  string            `json:"method,omitempty"`
	URL     string            `json:"url,omitempty"`
	Header  http.Header       `json:"header,omitempty"`
	Body    *string           `json:"body,omitempty"`
	BodyB64 []byte            `json:"body_b64,omitempty"`
	Query   string            `json:"query,omitempty"`
	Args    []any             `json:"args,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`

	// Outcome, in errors.jsonl only.
	Error  string `json:"error,omitempty"`
	Status int    `json:"status,omitempty"`
	// GRPCStatus is the grpc-status of a failed gRPC call.
	GRPCStatus string    `json:"grpc_status,omitempty"`
	SentAt     time.Time `json:"sent_at,omitzero"`
	LatencyMs  float64   `json:"latency_ms,omitempty"`
	Shard      string    `json:"shard,omitempty"`
}

func (r *Request) wire() wireRequest {
	w := wireRequest{V: FormatVersion, At: r.At, API: r.API, ID: r.ID, Kind: r.Kind, Method: r.Method,
		URL: r.URL, Header: r.Header, Query: r.Query, Args: r.Args, Meta: r.Meta}
	if r.Body != nil {
		if utf8.Valid(r.Body) {
			s := string(r.Body)
			w.Body = &s
		} else {
			w.BodyB64 = r.Body
		}
	}
	return w
}

func (w *wireRequest) request() Request {
	r := Request{At: w.At, API: w.API, ID: w.ID, Kind: w.Kind, Method: w.Method, URL: w.URL,
		Header: w.Header, Query: w.Query, Args: w.Args, Meta: w.Meta}
	if w.Body != nil {
		r.Body = []byte(*w.Body)
	} else if w.BodyB64 != nil {
		r.Body = w.BodyB64
	}
	return r
}

// MarshalJSON implements json.Marshaler: the line format of FORMAT.md.
func (r Request) MarshalJSON() ([]byte, error) { return json.Marshal(r.wire()) }

// UnmarshalJSON implements json.Unmarshaler and checks the line (see Validate).
func (r *Request) UnmarshalJSON(b []byte) error {
	var w wireRequest
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	return r.fromWire(&w)
}

func (r *Request) fromWire(w *wireRequest) error {
	if w.V != 0 && w.V != FormatVersion {
		return fmt.Errorf("unsupported timed-request format version %d (want %d)", w.V, FormatVersion)
	}
	*r = w.request()
	return r.Validate()
}

// EffectiveKind is Kind, or the kind implied by the fields that are set.
func (r *Request) EffectiveKind() string {
	switch {
	case r.Kind != "":
		return r.Kind
	case r.Query != "" && r.URL == "":
		return KindSQL
	default:
		return KindHTTP
	}
}

// Validate reports a request no executor could run: an unknown kind, an
// HTTP request without URL or with an unparsable one, a SQL request without
// query.
func (r *Request) Validate() error {
	switch r.EffectiveKind() {
	case KindHTTP:
		if r.URL == "" {
			return errors.New(`http request has no "url"`)
		}
		if _, err := url.Parse(r.URL); err != nil {
			return fmt.Errorf("bad url %q: %w", r.URL, err)
		}
		if r.Method != "" && !validMethod(r.Method) {
			return fmt.Errorf("bad method %q", r.Method)
		}
	case KindSQL:
		if strings.TrimSpace(r.Query) == "" {
			return errors.New(`sql request has no "query"`)
		}
	case KindGRPC:
		if !strings.HasPrefix(r.URL, "/") || strings.Count(r.URL, "/") != 2 {
			return fmt.Errorf(`grpc request "url" %q is not a method path (/package.Service/Method)`, r.URL)
		}
	default:
		return fmt.Errorf("unknown kind %q (want %q, %q or %q)", r.Kind, KindHTTP, KindSQL, KindGRPC)
	}
	return nil
}

func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return m != ""
}

// HTTPMethod is Method, or GET when empty.
func (r *Request) HTTPMethod() string {
	if r.Method == "" {
		return http.MethodGet
	}
	return r.Method
}

// APIName is API, or DefaultAPI(r) when empty.
func (r *Request) APIName() string {
	if r.API != "" {
		return r.API
	}
	return DefaultAPI(r)
}

// DefaultAPI names the group of a request that has no API: for HTTP
// recording.APIName, the naming regression replay uses too (identifier-like
// path segments become "{id}", so /orders/17 and /orders/18 count as one
// API); the first keyword and table for SQL ("SELECT orders").
func DefaultAPI(r *Request) string {
	switch r.EffectiveKind() {
	case KindSQL:
		return sqlAPI(r.Query)
	case KindGRPC: // as regression replay names a gRPC session
		return recording.APIName(http.MethodPost, r.URL)
	}
	return recording.APIName(r.HTTPMethod(), requestPath(r.URL))
}

// requestPath is the (escaped) path of an absolute URL or request URI,
// without parsing the whole URL: this runs for every request sent.
func requestPath(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
		if j := strings.IndexByte(u, '/'); j >= 0 {
			u = u[j:]
		} else {
			u = ""
		}
	}
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		u = u[:i]
	}
	if u == "" {
		return "/"
	}
	return u
}

func sqlAPI(q string) string {
	f := strings.Fields(q)
	if len(f) == 0 {
		return "SQL"
	}
	verb := strings.ToUpper(f[0])
	var table string
	for i := 1; i < len(f)-1; i++ {
		switch strings.ToUpper(f[i]) {
		case "FROM", "INTO", "UPDATE", "JOIN":
			table = f[i+1]
		}
		if table != "" {
			break
		}
	}
	if verb == "UPDATE" && len(f) > 1 {
		table = f[1]
	}
	table = strings.Trim(table, "`\"();,")
	if table == "" {
		return verb
	}
	return verb + " " + table
}

// LineError is a line of a timed-request file that could not be decoded.
type LineError struct {
	Source string // file name or URL
	Line   int    // 1-based
	Err    error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.Source, e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// MaxLine is the longest line a Reader accepts (a request body up to about
// this size); longer lines are reported as bad and skipped.
const MaxLine = 64 << 20

// Reader decodes timed requests from a JSONL stream, one at a time, so that
// files of any length are read in constant memory.
type Reader struct {
	name string
	lr   *lines.Reader
}

// NewReader returns a Reader of r; name is used in error messages.
func NewReader(r io.Reader, name string) *Reader {
	return &Reader{name: name, lr: lines.NewReader(r, 256<<10, MaxLine)}
}

// Line is the 1-based number of the line read last.
func (d *Reader) Line() int { return d.lr.Line() }

// Next decodes the next request into r. It returns io.EOF at the end, and
// a *LineError for a line that does not decode (the caller may go on
// reading); blank lines are skipped.
func (d *Reader) Next(r *Request) error {
	for {
		line, tooLong, err := d.lr.Next()
		if errors.Is(err, io.EOF) {
			return err
		}
		if err != nil {
			return fmt.Errorf("%s: %w", d.name, err)
		}
		if tooLong {
			return &LineError{d.name, d.Line(), fmt.Errorf("line longer than %d bytes", MaxLine)}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		// Decoding the wire form directly (not through UnmarshalJSON) scans
		// the line once instead of twice.
		var w wireRequest
		if err := json.Unmarshal(line, &w); err != nil {
			return &LineError{d.name, d.Line(), err}
		}
		if err := r.fromWire(&w); err != nil {
			return &LineError{d.name, d.Line(), err}
		}
		return nil
	}
}

// Writer encodes timed requests as JSONL. Call Flush at the end.
type Writer struct {
	bw  *bufio.Writer
	buf bytes.Buffer
	enc *json.Encoder
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer {
	wr := &Writer{bw: bufio.NewWriterSize(w, 256<<10)}
	wr.enc = json.NewEncoder(&wr.buf)
	wr.enc.SetEscapeHTML(false)
	return wr
}

// Write appends one request line.
func (w *Writer) Write(r *Request) error {
	return w.writeWire(r.wire())
}

func (w *Writer) writeWire(v wireRequest) error {
	w.buf.Reset()
	if err := w.enc.Encode(v); err != nil { // Encode appends the newline
		return err
	}
	_, err := w.bw.Write(w.buf.Bytes())
	return err
}

// Flush writes buffered lines to the underlying writer.
func (w *Writer) Flush() error { return w.bw.Flush() }
