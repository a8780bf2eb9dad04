// Package pricing is the example HTTP pricing service that the orders example
// calls downstream. It prices SKUs from a fixed catalog:
//
//	GET /price?sku=KB-101&sku=MS-220[&channel=web]
//	200 {"currency":"EUR","prices":[{"sku":"KB-101","name":"…","unit_cents":4999},…]}
//	404 {"error":"unknown sku \"X\""}
//
// Run it with `go run ./examples/pricing -listen 127.0.0.1:8081`, or mount
// NewHandler in any server (the demo runs it in-process).
package pricing
