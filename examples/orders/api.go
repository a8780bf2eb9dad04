package orders

import "time"

// User is a row of the users table.
type User struct {
	ID      int64  `json:"id"`
	Name    string `json:"name"`
	Email   string `json:"email"`
	Tier    string `json:"tier"`
	Country string `json:"country"`
}

// CreateOrder is the body of POST /orders.
type CreateOrder struct {
	UserID int64       `json:"user_id"`
	Items  []OrderItem `json:"items"`
	Coupon string      `json:"coupon,omitempty"`
}

// OrderItem is one line of an order request.
type OrderItem struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Line is one priced line of an order.
type Line struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	Qty       int    `json:"qty"`
	UnitCents int64  `json:"unit_cents"`
}

// Order is a stored order, the body of POST /orders (201) and GET /orders/{id}.
type Order struct {
	ID            string    `json:"order_id"`
	UserID        int64     `json:"user_id"`
	Status        string    `json:"status"`
	Currency      string    `json:"currency"`
	Lines         []Line    `json:"lines"`
	SubtotalCents int64     `json:"subtotal_cents"`
	DiscountCents int64     `json:"discount_cents"`
	ShippingCents int64     `json:"shipping_cents"`
	TotalCents    int64     `json:"total_cents"`
	CreatedAt     time.Time `json:"created_at"`
}

// OrderSummary is one entry of GET /users/{id}/orders.
type OrderSummary struct {
	ID         string    `json:"order_id"`
	Status     string    `json:"status"`
	TotalCents int64     `json:"total_cents"`
	Currency   string    `json:"currency"`
	CreatedAt  time.Time `json:"created_at"`
}

// UserOrders is the body of GET /users/{id}/orders.
type UserOrders struct {
	UserID int64          `json:"user_id"`
	Orders []OrderSummary `json:"orders"`
}

// Stock is the body of GET /stock/{sku}.
type Stock struct {
	SKU   string `json:"sku"`
	Units int64  `json:"units"`
}
