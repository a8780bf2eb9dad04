package protobuf

import "github.com/retrace-dev/retrace/wire/protobuf/numbered"

// DecodeRaw decodes a message without its schema (numbered.Decode). Keys
// are field numbers; a field seen more than once is a list. Varints are
// unsigned numbers, fixed32 and fixed64 are shown as unsigned numbers too
// (their float reading needs the schema), length-delimited fields are a
// nested message when they parse whole as one, else a string when they
// are printable UTF-8, else {"base64": …}. Bytes that are not a message
// are an error naming the offset.
func DecodeRaw(b []byte) (map[string]any, error) { return numbered.Decode(b) }
