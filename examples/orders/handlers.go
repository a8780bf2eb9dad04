package orders

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/retrace-dev/retrace/examples/fraud"
	"github.com/retrace-dev/retrace/examples/pricing"
)

const maxBody = 64 << 10

func (s *Server) createOrder(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	var req CreateOrder
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		fail(w, errorf(http.StatusBadRequest, "read body: %v", err))
		return
	}
	if len(body) > maxBody {
		fail(w, errorf(http.StatusRequestEntityTooLarge, "body larger than %d bytes", maxBody))
		return
	}
	if err := json.Unmarshal(body, &req); err != nil {
		fail(w, errorf(http.StatusBadRequest, "body is not an order: %v", err))
		return
	}
	if err := req.validate(); err != nil {
		fail(w, err)
		return
	}
	o, err := s.placeOrder(ctx, req)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, o)
}

func (req *CreateOrder) validate() error {
	if req.UserID <= 0 {
		return errorf(http.StatusBadRequest, "user_id %d is not a positive id", req.UserID)
	}
	if len(req.Items) == 0 || len(req.Items) > MaxItems {
		return errorf(http.StatusBadRequest, "%d items, want 1 to %d", len(req.Items), MaxItems)
	}
	seen := map[string]bool{}
	for i, it := range req.Items {
		if it.SKU == "" || len(it.SKU) > 32 {
			return errorf(http.StatusBadRequest, "items[%d]: sku %q is empty or longer than 32", i, it.SKU)
		}
		if it.Qty < 1 || it.Qty > MaxQty {
			return errorf(http.StatusBadRequest, "items[%d]: qty %d, want 1 to %d", i, it.Qty, MaxQty)
		}
		if seen[it.SKU] {
			return errorf(http.StatusBadRequest, "items[%d]: sku %q listed twice", i, it.SKU)
		}
		seen[it.SKU] = true
	}
	if len(req.Coupon) > 32 {
		return errorf(http.StatusBadRequest, "coupon %q longer than 32", req.Coupon)
	}
	return nil
}

// placeOrder is the write path, one downstream step after the other except
// for the fan-out of shipping and discount.
func (s *Server) placeOrder(ctx context.Context, req CreateOrder) (*Order, error) {
	user, err := s.user(ctx, req.UserID)
	if err != nil {
		return nil, err
	}
	if err := s.checkStock(ctx, req.Items); err != nil {
		return nil, err
	}
	quote, err := s.quote(ctx, req.Items)
	if err != nil {
		return nil, err
	}
	var shipping int64
	var discountPct int
	// Both lookups always run to the end (no shared cancellation): the
	// downstream calls of a request then never depend on which of the two
	// fails first, and a replay sends the same calls as the recording.
	var g errgroup.Group
	g.Go(func() (err error) { shipping, err = s.shippingRate(ctx, user.Country); return err })
	g.Go(func() (err error) { discountPct, err = s.discount(ctx, req.Coupon, user.Tier); return err })
	if err := g.Wait(); err != nil {
		return nil, err
	}

	o := &Order{UserID: user.ID, Status: "created", Currency: quote.Currency}
	if s.cfg.Variant == VariantChanged {
		o.Status = "pending"
	}
	for _, it := range req.Items {
		p := findPrice(quote, it.SKU)
		o.Lines = append(o.Lines, Line{SKU: it.SKU, Name: p.Name, Qty: it.Qty, UnitCents: p.UnitCents})
		o.SubtotalCents += p.UnitCents * int64(it.Qty)
	}
	o.DiscountCents = o.SubtotalCents * int64(discountPct) / 100
	if o.SubtotalCents-o.DiscountCents < FreeShipping {
		o.ShippingCents = shipping
	}
	o.TotalCents = o.SubtotalCents - o.DiscountCents + o.ShippingCents
	if err := s.checkFraud(ctx, user, o); err != nil {
		return nil, err
	}

	seq, err := s.rdb.Incr(ctx, s.cfg.RedisPrefix+"order-seq").Result()
	if err != nil {
		return nil, fmt.Errorf("order number from redis: %w", err)
	}
	// Order numbers are all digits, so every tool groups /orders/{id} as one API.
	o.ID = strconv.FormatInt(OrderNumberBase+seq, 10)
	o.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
	if err := s.insertOrder(ctx, o); err != nil {
		return nil, err
	}
	pipe := s.rdb.Pipeline()
	for _, it := range req.Items {
		pipe.DecrBy(ctx, s.cfg.RedisPrefix+"stock:"+it.SKU, int64(it.Qty))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("take stock for order %s: %w", o.ID, err)
	}
	return o, nil
}

// checkFraud asks the fraud service about o over the shared ClientConn:
// first the risk of every line (a server stream), then the verdict on the
// whole order (a unary call). Without a fraud service it does nothing.
func (s *Server) checkFraud(ctx context.Context, u *User, o *Order) error {
	if s.fraud == nil {
		return nil
	}
	fo := &fraud.Order{UserID: u.ID, Country: u.Country, Tier: u.Tier, TotalCents: o.TotalCents, Currency: o.Currency}
	if s.cfg.Variant == VariantChanged {
		fo.TotalCents = o.SubtotalCents + o.ShippingCents // the changed build forgets the discount
	}
	for _, l := range o.Lines {
		fo.Lines = append(fo.Lines, fraud.Line{SKU: l.SKU, Qty: int32(l.Qty), UnitCents: l.UnitCents})
	}
	sigs, err := s.fraud.Screen(ctx, fo)
	if err != nil {
		return fmt.Errorf("fraud screen: %w", err)
	}
	if len(sigs) != len(fo.Lines) {
		return fmt.Errorf("fraud screen: %d signals for %d lines", len(sigs), len(fo.Lines))
	}
	for _, sg := range sigs {
		fo.ScreenedRisk += sg.Risk
	}
	v, err := s.fraud.Check(ctx, fo)
	if err != nil {
		return fmt.Errorf("fraud check: %w", err)
	}
	if !v.Allow {
		return errorf(http.StatusUnprocessableEntity, "order refused by the fraud check: score %d (%s)", v.Score, strings.Join(v.Reasons, "; "))
	}
	return nil
}

// user reads a user with an explicitly prepared statement.
func (s *Server) user(ctx context.Context, id int64) (*User, error) {
	stmt, err := s.db.PrepareContext(ctx, "SELECT id, name, email, tier, country FROM users WHERE id = ?")
	if err != nil {
		return nil, fmt.Errorf("prepare user query: %w", err)
	}
	defer stmt.Close()
	var u User
	err = stmt.QueryRowContext(ctx, id).Scan(&u.ID, &u.Name, &u.Email, &u.Tier, &u.Country)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errorf(http.StatusNotFound, "user %d not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("read user %d: %w", id, err)
	}
	return &u, nil
}

// checkStock reads the stock of every item in one Redis pipeline.
func (s *Server) checkStock(ctx context.Context, items []OrderItem) error {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(items))
	for i, it := range items {
		cmds[i] = pipe.Get(ctx, s.cfg.RedisPrefix+"stock:"+it.SKU)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read stock: %w", err)
	}
	for i, it := range items {
		n, err := cmds[i].Int64()
		if errors.Is(err, redis.Nil) {
			return errorf(http.StatusUnprocessableEntity, "unknown sku %q", it.SKU)
		}
		if err != nil {
			return fmt.Errorf("stock of %q: %w", it.SKU, err)
		}
		if n < int64(it.Qty) {
			return errorf(http.StatusConflict, "sku %q: %d in stock, %d ordered", it.SKU, n, it.Qty)
		}
	}
	return nil
}

// quote asks the pricing service for the prices of the items.
func (s *Server) quote(ctx context.Context, items []OrderItem) (*pricing.Quote, error) {
	q := url.Values{}
	for _, it := range items {
		q.Add("sku", it.SKU)
	}
	if s.cfg.Variant == VariantChanged {
		q.Set("channel", "web")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.PricingURL+"/price?"+q.Encode(), nil)
	if err != nil {
		return nil, fmt.Errorf("pricing request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.pricing.Do(req)
	if err != nil {
		return nil, fmt.Errorf("pricing: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("pricing: read answer: %w", err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, errorf(http.StatusUnprocessableEntity, "pricing: %s", errorText(body))
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pricing: status %d: %s", resp.StatusCode, errorText(body))
	}
	var quote pricing.Quote
	if err := json.Unmarshal(body, &quote); err != nil {
		return nil, fmt.Errorf("pricing: answer is not a quote: %w", err)
	}
	for _, it := range items {
		if findPrice(&quote, it.SKU) == nil {
			return nil, fmt.Errorf("pricing: no price for %q in the answer", it.SKU)
		}
	}
	return &quote, nil
}

func findPrice(q *pricing.Quote, sku string) *pricing.Item {
	for i := range q.Prices {
		if q.Prices[i].SKU == sku {
			return &q.Prices[i]
		}
	}
	return nil
}

func errorText(body []byte) string {
	var e struct{ Error string }
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return e.Error
	}
	if len(body) > 200 {
		body = body[:200]
	}
	return string(body)
}

func (s *Server) shippingRate(ctx context.Context, country string) (int64, error) {
	var cents int64
	err := s.db.QueryRowContext(ctx, "SELECT cents FROM shipping_rates WHERE country = ?", country).Scan(&cents)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, errorf(http.StatusUnprocessableEntity, "no shipping to %q", country)
	}
	if err != nil {
		return 0, fmt.Errorf("shipping rate of %s: %w", country, err)
	}
	return cents, nil
}

// discount is the coupon's percentage, or the tier's when there is no coupon.
func (s *Server) discount(ctx context.Context, coupon, tier string) (int, error) {
	key := s.cfg.RedisPrefix + "tier-discount:" + tier
	if coupon != "" {
		key = s.cfg.RedisPrefix + "coupon:" + coupon
	}
	v, err := s.rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		if coupon != "" {
			return 0, errorf(http.StatusUnprocessableEntity, "unknown coupon %q", coupon)
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("discount: %w", err)
	}
	pct, err := strconv.Atoi(v)
	if err != nil || pct < 0 || pct > 100 {
		return 0, fmt.Errorf("discount at %s is %q, not a percentage", key, v)
	}
	return pct, nil
}

func (s *Server) insertOrder(ctx context.Context, o *Order) error {
	lines, err := json.Marshal(o.Lines)
	if err != nil {
		return err
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO orders
		(id, user_id, status, currency, subtotal_cents, discount_cents, shipping_cents, total_cents, items, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		o.ID, o.UserID, o.Status, o.Currency, o.SubtotalCents, o.DiscountCents, o.ShippingCents, o.TotalCents, string(lines), o.CreatedAt)
	if err != nil {
		return fmt.Errorf("write order %s: %w", o.ID, err)
	}
	return nil
}

func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if len(id) > 32 {
		fail(w, errorf(http.StatusBadRequest, "order id %.40q… is too long", id))
		return
	}
	var o Order
	var lines string
	err := s.db.QueryRowContext(r.Context(), `SELECT id, user_id, status, currency, subtotal_cents, discount_cents,
		shipping_cents, total_cents, items, created_at FROM orders WHERE id = ?`, id).
		Scan(&o.ID, &o.UserID, &o.Status, &o.Currency, &o.SubtotalCents, &o.DiscountCents, &o.ShippingCents, &o.TotalCents, &lines, &o.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		fail(w, errorf(http.StatusNotFound, "order %q not found", id))
		return
	}
	if err != nil {
		fail(w, fmt.Errorf("read order %q: %w", id, err))
		return
	}
	if err := json.Unmarshal([]byte(lines), &o.Lines); err != nil {
		fail(w, fmt.Errorf("order %q: stored lines: %w", id, err))
		return
	}
	o.CreatedAt = o.CreatedAt.UTC()
	writeJSON(w, http.StatusOK, &o)
}

func (s *Server) userOrders(w http.ResponseWriter, r *http.Request) {
	uid, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || uid <= 0 {
		fail(w, errorf(http.StatusBadRequest, "user id %q is not a positive integer", r.PathValue("id")))
		return
	}
	rows, err := s.db.QueryContext(r.Context(), `SELECT id, status, total_cents, currency, created_at
		FROM orders WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT `+strconv.Itoa(userListLimit), uid)
	if err != nil {
		fail(w, fmt.Errorf("orders of user %d: %w", uid, err))
		return
	}
	defer rows.Close()
	out := UserOrders{UserID: uid, Orders: []OrderSummary{}}
	for rows.Next() {
		var o OrderSummary
		if err := rows.Scan(&o.ID, &o.Status, &o.TotalCents, &o.Currency, &o.CreatedAt); err != nil {
			fail(w, fmt.Errorf("orders of user %d: %w", uid, err))
			return
		}
		o.CreatedAt = o.CreatedAt.UTC()
		out.Orders = append(out.Orders, o)
	}
	if err := rows.Err(); err != nil {
		fail(w, fmt.Errorf("orders of user %d: %w", uid, err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) stock(w http.ResponseWriter, r *http.Request) {
	sku := r.PathValue("sku")
	if len(sku) > 32 {
		fail(w, errorf(http.StatusBadRequest, "sku %.40q… is too long", sku))
		return
	}
	n, err := s.rdb.Get(r.Context(), s.cfg.RedisPrefix+"stock:"+sku).Int64()
	if errors.Is(err, redis.Nil) {
		fail(w, errorf(http.StatusNotFound, "unknown sku %q", sku))
		return
	}
	if err != nil {
		fail(w, fmt.Errorf("stock of %q: %w", sku, err))
		return
	}
	writeJSON(w, http.StatusOK, Stock{SKU: sku, Units: n})
}
