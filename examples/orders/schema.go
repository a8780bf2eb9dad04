package orders

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/retrace-dev/retrace/examples/pricing"
)

// schema is the MySQL schema of the service; it runs on MariaDB, MySQL and
// dolthub/go-mysql-server alike.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS users (
		id BIGINT NOT NULL PRIMARY KEY,
		name VARCHAR(100) NOT NULL,
		email VARCHAR(200) NOT NULL,
		tier VARCHAR(16) NOT NULL,
		country CHAR(2) NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS shipping_rates (
		country CHAR(2) NOT NULL PRIMARY KEY,
		cents BIGINT NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS orders (
		id VARCHAR(32) NOT NULL PRIMARY KEY,
		user_id BIGINT NOT NULL,
		status VARCHAR(16) NOT NULL,
		currency CHAR(3) NOT NULL,
		subtotal_cents BIGINT NOT NULL,
		discount_cents BIGINT NOT NULL,
		shipping_cents BIGINT NOT NULL,
		total_cents BIGINT NOT NULL,
		items TEXT NOT NULL,
		created_at DATETIME(6) NOT NULL,
		INDEX orders_by_user (user_id, created_at)
	)`,
}

// Seed sizes and values, shared with traffic generators.
const (
	SeedUsers     = 200     // users 1..SeedUsers exist
	SeedStock     = 1000000 // units of every SKU at seed time
	FreeShipping  = 10000   // subtotal in cents from which shipping is free
	MaxItems      = 20      // items per order
	MaxQty        = 100     // units per item
	userListLimit = 20
	// OrderNumberBase is added to the Redis order sequence: the first order
	// is 100000001.
	OrderNumberBase = 100000000
)

// Tiers, countries and coupons of the seed data.
var (
	Tiers     = []string{"standard", "silver", "gold"}
	Countries = []string{"DE", "FR", "NL", "IT", "ES", "AT", "BE", "US"}
	Coupons   = map[string]int{"WELCOME10": 10, "SPRING15": 15, "VIP25": 25}
	// tierDiscount is the percentage off for orders without a coupon.
	tierDiscount  = map[string]int{"standard": 0, "silver": 5, "gold": 10}
	shippingCents = map[string]int{"DE": 490, "FR": 690, "NL": 590, "IT": 790, "ES": 790, "AT": 590, "BE": 590, "US": 1990}
)

// SeedUser returns the seeded user with id (1..SeedUsers).
func SeedUser(id int) User {
	return User{
		ID:      int64(id),
		Name:    fmt.Sprintf("Customer %03d", id),
		Email:   fmt.Sprintf("customer%03d@example.com", id),
		Tier:    Tiers[id%len(Tiers)],
		Country: Countries[id%len(Countries)],
	}
}

// CreateSchema creates the tables of the service if they do not exist.
func CreateSchema(ctx context.Context, db *sql.DB) error {
	for _, stmt := range schema {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("orders: create schema: %w (statement %.40q…)", err, strings.Join(strings.Fields(stmt), " "))
		}
	}
	return nil
}

// Seed fills MySQL with users and shipping rates and Redis (keys under
// prefix) with stock, coupons and tier discounts. It overwrites seed rows
// and keys and leaves orders alone, so it can run again.
func Seed(ctx context.Context, db *sql.DB, rdb redis.UniversalClient, prefix string) error {
	if prefix == "" {
		prefix = "orders:"
	}
	var b strings.Builder
	args := make([]any, 0, SeedUsers*5)
	b.WriteString("REPLACE INTO users (id, name, email, tier, country) VALUES ")
	for id := 1; id <= SeedUsers; id++ {
		if id > 1 {
			b.WriteString(",")
		}
		b.WriteString("(?,?,?,?,?)")
		u := SeedUser(id)
		args = append(args, u.ID, u.Name, u.Email, u.Tier, u.Country)
	}
	if _, err := db.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("orders: seed users: %w", err)
	}
	for _, c := range Countries {
		if _, err := db.ExecContext(ctx, "REPLACE INTO shipping_rates (country, cents) VALUES (?, ?)", c, shippingCents[c]); err != nil {
			return fmt.Errorf("orders: seed shipping rate of %s: %w", c, err)
		}
	}
	pipe := rdb.Pipeline()
	for _, sku := range pricing.SKUs() {
		pipe.Set(ctx, prefix+"stock:"+sku, SeedStock, 0)
	}
	for code, pct := range Coupons {
		pipe.Set(ctx, prefix+"coupon:"+code, strconv.Itoa(pct), 0)
	}
	for tier, pct := range tierDiscount {
		pipe.Set(ctx, prefix+"tier-discount:"+tier, strconv.Itoa(pct), 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("orders: seed redis at prefix %q: %w", prefix, err)
	}
	return nil
}
