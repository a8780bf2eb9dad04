package wire

// Masker is implemented by a protocol that knows where the values of its
// recorded messages are, so that masking rules (recording.Masker, from
// RETRACE_MASK) reach them and nothing else: HTTP header values, query
// and form fields and bodies (decoded from their content coding), Redis
// arguments and reply strings, SQL text and bound parameters, protobuf
// string fields. Every protocol package's Protocol implements it.
type Masker interface {
	// Mask returns msg, one recorded half of a call (or of an inbound
	// request) sent by side, with every value the rules replace replaced
	// and every length, count and checksum that frames a changed value
	// fixed, so the result is as well-formed as msg was. msg is never
	// modified; when nothing changed Mask returns msg itself. Bytes it
	// cannot read as the protocol (a message cut by the payload cap, a
	// body in a coding it does not know) are masked as text where that
	// keeps them readable, else kept and reported with MaskRules.Skip.
	Mask(side Side, msg []byte, rules MaskRules) []byte
}

// MaskRules is what a Masker applies to the values it finds. Its methods
// return their input itself when they change nothing.
type MaskRules interface {
	// Header returns the replacement of the whole value of a header (HTTP
	// header, HTTP/2 field, gRPC metadata) named name, in any case.
	Header(name string) (repl string, ok bool)
	// Field returns the replacement of the value of the field named name
	// of a flat name=value encoding (form bodies, query strings), decoded.
	Field(name string) (repl string, ok bool)
	// JSON masks a JSON document (whole, or cut short by the payload cap)
	// by the rules' paths.
	JSON(doc []byte) []byte
	// Text applies the rules' patterns to one value, or to bytes of no
	// known structure.
	Text(v []byte) []byte
	// Skip reports a value kept as recorded because it could not be read
	// to mask; why names it and the reason.
	Skip(why string)
}

// MaskerFor returns the masker of the protocol recorded as name: the
// protocol's own, or, for a protocol that has none (or a name no protocol
// has), the rules' patterns over the bytes.
func (r *Registry) MaskerFor(name string) Masker {
	if m, ok := r.For(name).(Masker); ok {
		return m
	}
	return textMasker{}
}

// textMasker masks bytes of no known structure with the rules' patterns.
type textMasker struct{}

func (textMasker) Mask(_ Side, msg []byte, rules MaskRules) []byte { return rules.Text(msg) }
