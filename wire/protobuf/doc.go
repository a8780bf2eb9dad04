// Package protobuf shows protobuf messages in a readable, comparable form:
// without a schema, by field number (the wire types tell numbers from
// bytes; bytes that parse whole as a message are shown as one), and with
// descriptors (wire/protobuf/descriptors, through Schema), by field name
// as protojson writes them.
//
// The decoded form is a JSON-shaped tree (map[string]any, []any, string,
// json.Number, bool), so diffs and rules address fields by path.
package protobuf
