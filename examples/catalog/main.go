// Command catalog is an example service written the way product teams
// write them: gorm over MySQL, go-redis, and a net/http client of another
// service; and like most, it talks to its databases before it serves —
// gorm.Open pings the server and reads its version, AutoMigrate reads the
// schema, go-redis pings. None of that belongs to a request, so in replay
// mode it is answered from the start-up recording (retrace's background
// sessions): the service boots with no downstream running.
//
//	CATALOG_MYSQL='user:pass@tcp(127.0.0.1:3306)/db' CATALOG_REDIS=127.0.0.1:6379 \
//	CATALOG_PRICING=http://127.0.0.1:8081 go run ./examples/catalog -listen 127.0.0.1:8090
//
// GET /items/{id} reads an item (Redis first, then MySQL) and prices it;
// POST /items creates one from {"sku","name"}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/retrace-dev/retrace/patches"
)

// Item is the service's one table.
type Item struct {
	ID   uint   `gorm:"primaryKey" json:"id"`
	SKU  string `gorm:"size:32;uniqueIndex" json:"sku"`
	Name string `gorm:"size:128" json:"name"`
}

type service struct {
	db      *gorm.DB
	rdb     *redis.Client
	pricing string
	hc      *http.Client
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "listen address")
	flag.Parse()
	if err := run(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "catalog:", err)
		os.Exit(1)
	}
}

func run(listen string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := start(ctx, os.Getenv("CATALOG_MYSQL"), os.Getenv("CATALOG_REDIS"), os.Getenv("CATALOG_PRICING"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "catalog: listening on", ln.Addr())
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	defer func() { <-done }()
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// what the agent recorded is written before the process ends
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return patches.Stop(sctx)
}

// start connects to the databases the way most services do before they
// serve, and fails when they do not answer.
func start(ctx context.Context, dsn, redisAddr, pricing string) (*service, error) {
	db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	if err := db.WithContext(ctx).AutoMigrate(&Item{}); err != nil {
		return nil, fmt.Errorf("mysql: migrate: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return &service{db: db, rdb: rdb, pricing: pricing, hc: &http.Client{Timeout: 10 * time.Second}}, nil
}

func (s *service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /items/{id}", s.getItem)
	mux.HandleFunc("POST /items", s.createItem)
	return mux
}

func (s *service) getItem(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil {
		http.Error(w, "bad id", http.StatusBadRequest)
		return
	}
	key := "catalog:item:" + strconv.Itoa(id)
	var it Item
	if b, err := s.rdb.Get(ctx, key).Bytes(); err == nil {
		err = json.Unmarshal(b, &it)
		if err != nil {
			http.Error(w, "cache: "+err.Error(), http.StatusInternalServerError)
			return
		}
	} else if errors.Is(err, redis.Nil) {
		if err := s.db.WithContext(ctx).First(&it, id).Error; errors.Is(err, gorm.ErrRecordNotFound) {
			http.Error(w, "no such item", http.StatusNotFound)
			return
		} else if err != nil {
			http.Error(w, "mysql: "+err.Error(), http.StatusBadGateway)
			return
		}
		b, _ := json.Marshal(it)
		if err := s.rdb.Set(ctx, key, b, time.Minute).Err(); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusBadGateway)
			return
		}
	} else {
		http.Error(w, "redis: "+err.Error(), http.StatusBadGateway)
		return
	}
	price, err := s.price(ctx, it.SKU)
	if err != nil {
		http.Error(w, "pricing: "+err.Error(), http.StatusBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"item": it, "price": price})
}

func (s *service) createItem(w http.ResponseWriter, r *http.Request) {
	var it Item
	if err := json.NewDecoder(r.Body).Decode(&it); err != nil || it.SKU == "" {
		http.Error(w, "want {\"sku\",\"name\"}", http.StatusBadRequest)
		return
	}
	it.ID = 0
	if err := s.db.WithContext(r.Context()).Create(&it).Error; err != nil {
		http.Error(w, "mysql: "+err.Error(), http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(it)
}

// price asks the pricing service (examples/pricing) for a SKU's price.
func (s *service) price(ctx context.Context, sku string) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.pricing+"/price?sku="+sku, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return json.RawMessage(b), nil
}
