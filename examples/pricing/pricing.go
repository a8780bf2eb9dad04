package pricing

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Item is one catalog entry.
type Item struct {
	SKU       string `json:"sku"`
	Name      string `json:"name"`
	UnitCents int64  `json:"unit_cents"`
}

// Currency is the currency of every price in the catalog.
const Currency = "EUR"

// catalog is the fixed price list; the orders example seeds its stock from
// the same SKUs.
var catalog = []Item{
	{"KB-101", "mechanical keyboard", 8999},
	{"MS-220", "wireless mouse", 2999},
	{"MN-270", "27-inch monitor", 27900},
	{"HD-330", "noise-cancelling headset", 14950},
	{"CB-010", "USB-C cable 1m", 899},
	{"DK-500", "docking station", 18900},
	{"WC-720", "webcam 1080p", 5490},
	{"LS-040", "laptop stand", 3999},
}

// Catalog returns a copy of the price list, in a stable order.
func Catalog() []Item { return slices.Clone(catalog) }

// SKUs returns the SKUs of the catalog, in a stable order.
func SKUs() []string {
	s := make([]string, len(catalog))
	for i, it := range catalog {
		s[i] = it.SKU
	}
	return s
}

// Lookup returns the catalog entry of sku.
func Lookup(sku string) (Item, bool) {
	for _, it := range catalog {
		if it.SKU == sku {
			return it, true
		}
	}
	return Item{}, false
}

// Quote is the body of a successful GET /price.
type Quote struct {
	Currency string `json:"currency"`
	Channel  string `json:"channel,omitempty"`
	Prices   []Item `json:"prices"`
}

// MaxSKUs is the most SKUs one request may price.
const MaxSKUs = 50

// NewHandler returns the pricing service's HTTP handler.
func NewHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /price", servePrice)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	return mux
}

func servePrice(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var skus []string
	for _, v := range q["sku"] {
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				skus = append(skus, s)
			}
		}
	}
	if len(skus) == 0 {
		writeError(w, http.StatusBadRequest, "missing query parameter sku")
		return
	}
	if len(skus) > MaxSKUs {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%d skus in one request, at most %d", len(skus), MaxSKUs))
		return
	}
	quote := Quote{Currency: Currency, Channel: q.Get("channel"), Prices: make([]Item, 0, len(skus))}
	for _, s := range skus {
		it, ok := Lookup(s)
		if !ok {
			writeError(w, http.StatusNotFound, fmt.Sprintf("unknown sku %q", s))
			return
		}
		quote.Prices = append(quote.Prices, it)
	}
	writeJSON(w, http.StatusOK, quote)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
