package orders

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Config configures a Server. Zero values are noted per field.
type Config struct {
	// MySQLDSN is the go-sql-driver/mysql DSN of the orders database.
	// Required. parseTime=true and loc=UTC are forced.
	MySQLDSN string
	// RedisAddr is the host:port of Redis. Required.
	RedisAddr string
	// RedisPrefix is put in front of every Redis key; zero means "orders:".
	RedisPrefix string
	// PricingURL is the base URL of the pricing service. Required.
	PricingURL string
	// PricingCA is the PEM file of the CA that signed the certificate of
	// an https PricingURL; empty means the system's roots.
	PricingCA string
	// FraudAddr is the host:port of the fraud-check service (gRPC,
	// plaintext HTTP/2); empty means orders are placed without a fraud
	// check.
	FraudAddr string
	// Variant selects a build: "" (the normal build) or "changed".
	Variant string
	// Timeout bounds the downstream work of one request; zero means 5s.
	Timeout time.Duration
	// MaxDBConns caps open MySQL connections; zero means no cap (and 32
	// idle connections kept). With a cap, database/sql opens connections
	// for waiting requests on a background goroutine of its own.
	MaxDBConns int
}

// Variants a Config may select.
const (
	VariantNormal  = ""
	VariantChanged = "changed"
)

// Environment variables read by ConfigFromEnv.
const (
	EnvMySQLDSN    = "ORDERS_MYSQL_DSN"
	EnvRedisAddr   = "ORDERS_REDIS_ADDR"
	EnvRedisPrefix = "ORDERS_REDIS_PREFIX"
	EnvPricingURL  = "ORDERS_PRICING_URL"
	EnvPricingCA   = "ORDERS_PRICING_CA"
	EnvFraudAddr   = "ORDERS_FRAUD_ADDR"
	EnvVariant     = "ORDERS_VARIANT"
	EnvMaxDBConns  = "ORDERS_MYSQL_MAX_CONNS"
	EnvTimeout     = "ORDERS_TIMEOUT"
)

// ConfigFromEnv returns a Config read from the ORDERS_* environment
// variables; unset variables leave zero values.
func ConfigFromEnv() Config {
	return Config{
		MySQLDSN:    os.Getenv(EnvMySQLDSN),
		RedisAddr:   os.Getenv(EnvRedisAddr),
		RedisPrefix: os.Getenv(EnvRedisPrefix),
		PricingURL:  os.Getenv(EnvPricingURL),
		PricingCA:   os.Getenv(EnvPricingCA),
		FraudAddr:   os.Getenv(EnvFraudAddr),
		Variant:     os.Getenv(EnvVariant),
		MaxDBConns:  atoiOr0(os.Getenv(EnvMaxDBConns)),
		Timeout:     durationOr0(os.Getenv(EnvTimeout)),
	}
}

// durationOr0 parses a Go duration ("30s"); anything else is 0, the default.
func durationOr0(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0
	}
	return d
}

func atoiOr0(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// withDefaults fills zero values and validates the result.
func (c Config) withDefaults() (Config, error) {
	if c.RedisPrefix == "" {
		c.RedisPrefix = "orders:"
	}
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	var errs []error
	if c.MySQLDSN == "" {
		errs = append(errs, errors.New("orders: MySQL DSN is empty"))
	} else if _, err := mysql.ParseDSN(c.MySQLDSN); err != nil {
		errs = append(errs, fmt.Errorf("orders: MySQL DSN %q: %w", c.MySQLDSN, err))
	}
	if c.RedisAddr == "" {
		errs = append(errs, errors.New("orders: Redis address is empty"))
	}
	if c.PricingURL == "" {
		errs = append(errs, errors.New("orders: pricing URL is empty"))
	} else if u, err := url.Parse(c.PricingURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("orders: pricing URL %q is not an http(s) URL", c.PricingURL))
	}
	if c.FraudAddr != "" {
		if _, _, err := net.SplitHostPort(c.FraudAddr); err != nil {
			errs = append(errs, fmt.Errorf("orders: fraud service address %q is not host:port: %w", c.FraudAddr, err))
		}
	}
	c.PricingURL = strings.TrimRight(c.PricingURL, "/")
	if c.MaxDBConns < 0 {
		errs = append(errs, fmt.Errorf("orders: MaxDBConns %d is negative", c.MaxDBConns))
	}
	if c.Variant != VariantNormal && c.Variant != VariantChanged {
		errs = append(errs, fmt.Errorf("orders: variant %q is neither empty nor %q", c.Variant, VariantChanged))
	}
	return c, errors.Join(errs...)
}

// mysqlConfig parses the DSN and forces what the service relies on.
func mysqlConfig(dsn string) (*mysql.Config, error) {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("orders: MySQL DSN %q: %w", dsn, err)
	}
	mc.ParseTime = true
	mc.Loc = time.UTC
	return mc, nil
}
