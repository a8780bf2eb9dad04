// Package orders is the example order service that retrace records and
// replays: a small but realistic write path over MySQL, Redis, an HTTP
// downstream and a gRPC one.
//
//	POST /orders              {"user_id":7,"items":[{"sku":"KB-101","qty":1}],"coupon":"WELCOME10"}
//	GET  /orders/{id}         one order
//	GET  /users/{id}/orders   the user's latest orders
//	GET  /stock/{sku}         units in stock
//	GET  /healthz             no downstream
//
// POST /orders reads the user with a prepared statement (database/sql and
// go-sql-driver/mysql), checks stock with a Redis pipeline (go-redis), asks
// the pricing service over one shared keep-alive http.Client, fans out with
// errgroup to a MySQL shipping-rate query and a Redis discount lookup, asks
// the fraud-check service (examples/fraud, gRPC over one shared ClientConn:
// a server stream of per-line risks, then a unary verdict; 422 when it
// refuses the order; skipped without Config.FraudAddr), takes an order number from Redis, writes the order to MySQL, takes the units off
// the stock and answers 201 with the order id and its creation time.
//
// The service itself knows nothing of retrace: its main (cmd/orders) adds the
// one blank import of the agent. Variant "changed" (env ORDERS_VARIANT) is a
// deliberately different build for regression-replay demonstrations: new
// orders get status "pending" instead of "created", the pricing request
// carries an extra channel parameter, and the fraud check of a discounted
// order is told the total before the discount.
package orders
