// Package descriptors names protobuf fields from descriptors: a
// FileDescriptorSet file (protoc --descriptor_set_out --include_imports),
// descriptors a server's reflection sent, or generated code linked into the
// program. It is the heavy half of wire/protobuf (protobuf's registry,
// dynamic messages and JSON), kept out of the agent: the agent decodes by
// field number only, and tools that have descriptors pass a *Schema to
// wire/http2.DecodeMessage as a protobuf.Schema.
package descriptors

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/retrace-dev/retrace/wire/protobuf"
)

// Schema knows message types by name and gRPC methods by path, from
// descriptors.
type Schema struct {
	files *protoregistry.Files
}

// Load reads a FileDescriptorSet file (protoc
// --descriptor_set_out=FILE --include_imports).
func Load(path string) (*Schema, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("descriptors: descriptor set: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("descriptors: descriptor set %s: %w", path, err)
	}
	return s, nil
}

// Parse reads a serialized FileDescriptorSet.
func Parse(b []byte) (*Schema, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a FileDescriptorSet: %w", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("descriptors do not resolve: %w", err)
	}
	return &Schema{files: files}, nil
}

// Of builds a Schema from file descriptors already linked into the
// program (generated code's File_x_proto variables) and their imports.
func Of(fds ...protoreflect.FileDescriptor) (*Schema, error) {
	var set descriptorpb.FileDescriptorSet
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imps := fd.Imports()
		for i := 0; i < imps.Len(); i++ {
			add(imps.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	for _, fd := range fds {
		add(fd)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("descriptors: descriptors do not resolve: %w", err)
	}
	return &Schema{files: files}, nil
}

// Method returns the request and response message types of the gRPC
// method at path ("/pkg.Service/Method").
func (s *Schema) Method(path string) (in, out protoreflect.MessageDescriptor, err error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if !ok || svc == "" || name == "" {
		return nil, nil, fmt.Errorf("descriptors: %q is not a gRPC method path", path)
	}
	d, err := s.files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, nil, fmt.Errorf("descriptors: service %s: %w", svc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, nil, fmt.Errorf("descriptors: %s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, nil, fmt.Errorf("descriptors: service %s has no method %s", svc, name)
	}
	return md.Input(), md.Output(), nil
}

// DecodeMethod decodes b, a request message of the gRPC method at path (a
// response message when response is true), by field name. known is false
// when s is nil or does not know the method: the caller then decodes by
// field number.
func (s *Schema) DecodeMethod(path string, response bool, b []byte) (tree map[string]any, known bool, err error) {
	if s == nil {
		return nil, false, nil
	}
	in, out, err := s.Method(path)
	if err != nil {
		return nil, false, nil
	}
	md := in
	if response {
		md = out
	}
	tree, err = Decode(md, b)
	return tree, true, err
}

var _ protobuf.Schema = (*Schema)(nil)

// Decode decodes b as a message of type md, by field name (protojson's
// names, unknown fields kept by number under "?unknown").
func Decode(md protoreflect.MessageDescriptor, b []byte) (map[string]any, error) {
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("descriptors: %s: %w", md.FullName(), err)
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("descriptors: %s: %w", md.FullName(), err)
	}
	out := map[string]any{}
	dec := json.NewDecoder(strings.NewReader(string(js)))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("descriptors: %s: %w", md.FullName(), err)
	}
	if u := m.GetUnknown(); len(u) > 0 {
		raw, err := protobuf.DecodeRaw(u)
		if err == nil {
			out["?unknown"] = raw
		}
	}
	return out, nil
}
