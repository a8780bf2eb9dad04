package fraud

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The service's protobuf schema, as a .proto file would declare it:
//
//	syntax = "proto3";
//	package retrace.examples.fraud.v1;
//
//	message Line    { string sku = 1; int32 qty = 2; int64 unit_cents = 3; }
//	message Order   { int64 user_id = 1; string country = 2; string tier = 3;
//	                  int64 total_cents = 4; string currency = 5; repeated Line lines = 6;
//	                  int32 screened_risk = 7; }
//	message Signal  { string sku = 1; int32 risk = 2; string note = 3; }
//	message Verdict { bool allow = 1; int32 score = 2; repeated string reasons = 3; }
//
//	service Fraud {
//	  rpc Check(Order) returns (Verdict);
//	  rpc Screen(Order) returns (stream Signal);
//	}
//
// There is no protoc on the build machines, so the descriptor is built here
// and the messages are dynamicpb messages of it: real protobuf on the wire,
// and a descriptor set (FileDescriptorSet) for tools that decode by name.
const (
	protoPackage = "retrace.examples.fraud.v1"
	// ServiceName is the gRPC service's full name.
	ServiceName = protoPackage + ".Fraud"
	// Method paths, as they appear in :path.
	CheckMethod  = "/" + ServiceName + "/Check"
	ScreenMethod = "/" + ServiceName + "/Screen"
)

// schema holds the descriptors the messages are built from.
var schema = mustSchema()

type schemaDescs struct {
	file                         protoreflect.FileDescriptor
	line, order, signal, verdict protoreflect.MessageDescriptor
}

func mustSchema() *schemaDescs {
	fd, err := protodesc.NewFile(fileProto(), protoregistry.GlobalFiles)
	if err != nil {
		panic(fmt.Sprintf("fraud: schema: %v", err))
	}
	// Registered so that server reflection describes the service.
	if err := protoregistry.GlobalFiles.RegisterFile(fd); err != nil {
		panic(fmt.Sprintf("fraud: registering the schema: %v", err))
	}
	ms := fd.Messages()
	return &schemaDescs{file: fd, line: ms.ByName("Line"), order: ms.ByName("Order"),
		signal: ms.ByName("Signal"), verdict: ms.ByName("Verdict")}
}

func fileProto() *descriptorpb.FileDescriptorProto {
	field := func(name string, num int32, typ descriptorpb.FieldDescriptorProto_Type, repeated bool, msg string) *descriptorpb.FieldDescriptorProto {
		label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		if repeated {
			label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		}
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(num), Type: typ.Enum(),
			Label: label.Enum(), JsonName: proto.String(jsonName(name))}
		if msg != "" {
			f.TypeName = proto.String("." + protoPackage + "." + msg)
		}
		return f
	}
	const (
		str   = descriptorpb.FieldDescriptorProto_TYPE_STRING
		i32   = descriptorpb.FieldDescriptorProto_TYPE_INT32
		i64   = descriptorpb.FieldDescriptorProto_TYPE_INT64
		boolT = descriptorpb.FieldDescriptorProto_TYPE_BOOL
		msg   = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	message := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	return &descriptorpb.FileDescriptorProto{
		Name:    proto.String("retrace/examples/fraud/v1/fraud.proto"),
		Package: proto.String(protoPackage),
		Syntax:  proto.String("proto3"),
		Options: &descriptorpb.FileOptions{GoPackage: proto.String("github.com/retrace-dev/retrace/examples/fraud")},
		MessageType: []*descriptorpb.DescriptorProto{
			message("Line", field("sku", 1, str, false, ""), field("qty", 2, i32, false, ""), field("unit_cents", 3, i64, false, "")),
			message("Order", field("user_id", 1, i64, false, ""), field("country", 2, str, false, ""), field("tier", 3, str, false, ""),
				field("total_cents", 4, i64, false, ""), field("currency", 5, str, false, ""), field("lines", 6, msg, true, "Line"),
				field("screened_risk", 7, i32, false, "")),
			message("Signal", field("sku", 1, str, false, ""), field("risk", 2, i32, false, ""), field("note", 3, str, false, "")),
			message("Verdict", field("allow", 1, boolT, false, ""), field("score", 2, i32, false, ""), field("reasons", 3, str, true, "")),
		},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Fraud"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Check"), InputType: proto.String("." + protoPackage + ".Order"), OutputType: proto.String("." + protoPackage + ".Verdict")},
				{Name: proto.String("Screen"), InputType: proto.String("." + protoPackage + ".Order"), OutputType: proto.String("." + protoPackage + ".Signal"),
					ServerStreaming: proto.Bool(true)},
			},
		}},
	}
}

// jsonName is protoc's JSON name of a field: lowerCamelCase.
func jsonName(s string) string {
	out := make([]byte, 0, len(s))
	up := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' {
			up = true
			continue
		}
		if up && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		out = append(out, c)
	}
	return string(out)
}

// FileDescriptorSet is the service's schema as `protoc --descriptor_set_out
// --include_imports` writes it, for tools that decode messages by field
// name (wire/protobuf/descriptors.Load).
func FileDescriptorSet() ([]byte, error) {
	return proto.Marshal(&descriptorpb.FileDescriptorSet{File: []*descriptorpb.FileDescriptorProto{protodesc.ToFileDescriptorProto(schema.file)}})
}

// The Go types of the messages, converted to and from dynamicpb messages at
// the edges (the codec sees only proto.Message values).

// Line is one line of an Order.
type Line struct {
	SKU       string
	Qty       int32
	UnitCents int64
}

// Order is what Check and Screen look at.
type Order struct {
	UserID     int64
	Country    string
	Tier       string
	TotalCents int64
	Currency   string
	Lines      []Line
	// ScreenedRisk is the sum of the risks Screen signalled for the order
	// (Check adds half of it to its score).
	ScreenedRisk int32
}

// Signal is one message of Screen's answer: the risk one line carries.
type Signal struct {
	SKU  string
	Risk int32
	Note string
}

// Verdict is Check's answer.
type Verdict struct {
	Allow   bool
	Score   int32
	Reasons []string
}

func fieldOf(md protoreflect.MessageDescriptor, name protoreflect.Name) protoreflect.FieldDescriptor {
	return md.Fields().ByName(name)
}

func (o *Order) message() *dynamicpb.Message {
	md := schema.order
	m := dynamicpb.NewMessage(md)
	m.Set(fieldOf(md, "user_id"), protoreflect.ValueOfInt64(o.UserID))
	m.Set(fieldOf(md, "country"), protoreflect.ValueOfString(o.Country))
	m.Set(fieldOf(md, "tier"), protoreflect.ValueOfString(o.Tier))
	m.Set(fieldOf(md, "total_cents"), protoreflect.ValueOfInt64(o.TotalCents))
	m.Set(fieldOf(md, "currency"), protoreflect.ValueOfString(o.Currency))
	m.Set(fieldOf(md, "screened_risk"), protoreflect.ValueOfInt32(o.ScreenedRisk))
	lines := m.Mutable(fieldOf(md, "lines")).List()
	for _, l := range o.Lines {
		lm := dynamicpb.NewMessage(schema.line)
		lm.Set(fieldOf(schema.line, "sku"), protoreflect.ValueOfString(l.SKU))
		lm.Set(fieldOf(schema.line, "qty"), protoreflect.ValueOfInt32(l.Qty))
		lm.Set(fieldOf(schema.line, "unit_cents"), protoreflect.ValueOfInt64(l.UnitCents))
		lines.Append(protoreflect.ValueOfMessage(lm))
	}
	return m
}

func orderOf(m protoreflect.Message) *Order {
	md := schema.order
	o := &Order{
		UserID:       m.Get(fieldOf(md, "user_id")).Int(),
		Country:      m.Get(fieldOf(md, "country")).String(),
		Tier:         m.Get(fieldOf(md, "tier")).String(),
		TotalCents:   m.Get(fieldOf(md, "total_cents")).Int(),
		Currency:     m.Get(fieldOf(md, "currency")).String(),
		ScreenedRisk: int32(m.Get(fieldOf(md, "screened_risk")).Int()),
	}
	lines := m.Get(fieldOf(md, "lines")).List()
	for i := range lines.Len() {
		lm := lines.Get(i).Message()
		o.Lines = append(o.Lines, Line{SKU: lm.Get(fieldOf(schema.line, "sku")).String(),
			Qty: int32(lm.Get(fieldOf(schema.line, "qty")).Int()), UnitCents: lm.Get(fieldOf(schema.line, "unit_cents")).Int()})
	}
	return o
}

func (s *Signal) message() *dynamicpb.Message {
	md := schema.signal
	m := dynamicpb.NewMessage(md)
	m.Set(fieldOf(md, "sku"), protoreflect.ValueOfString(s.SKU))
	m.Set(fieldOf(md, "risk"), protoreflect.ValueOfInt32(s.Risk))
	m.Set(fieldOf(md, "note"), protoreflect.ValueOfString(s.Note))
	return m
}

func signalOf(m protoreflect.Message) Signal {
	md := schema.signal
	return Signal{SKU: m.Get(fieldOf(md, "sku")).String(), Risk: int32(m.Get(fieldOf(md, "risk")).Int()),
		Note: m.Get(fieldOf(md, "note")).String()}
}

func (v *Verdict) message() *dynamicpb.Message {
	md := schema.verdict
	m := dynamicpb.NewMessage(md)
	m.Set(fieldOf(md, "allow"), protoreflect.ValueOfBool(v.Allow))
	m.Set(fieldOf(md, "score"), protoreflect.ValueOfInt32(v.Score))
	rs := m.Mutable(fieldOf(md, "reasons")).List()
	for _, r := range v.Reasons {
		rs.Append(protoreflect.ValueOfString(r))
	}
	return m
}

func verdictOf(m protoreflect.Message) *Verdict {
	md := schema.verdict
	v := &Verdict{Allow: m.Get(fieldOf(md, "allow")).Bool(), Score: int32(m.Get(fieldOf(md, "score")).Int())}
	rs := m.Get(fieldOf(md, "reasons")).List()
	for i := range rs.Len() {
		v.Reasons = append(v.Reasons, rs.Get(i).String())
	}
	return v
}

// Marshal is o in protobuf, as it goes on the wire.
func (o *Order) Marshal() ([]byte, error) { return proto.Marshal(o.message()) }

// Marshal is v in protobuf, as it goes on the wire.
func (v *Verdict) Marshal() ([]byte, error) { return proto.Marshal(v.message()) }
