package mockserver

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/retrace-dev/retrace/trace"
)

// Handler returns the admin API (see api.go), for serving on a listener of
// the caller's choice; it checks Config.AdminToken. The admin listener
// serves it together with /debug/pprof/.
func (s *Server) Handler() http.Handler { return s.adminHandler(false) }

// adminHandler is the admin API, with the Go profiler when pprof is set.
// Every path but GET /healthz needs the token when one is configured.
func (s *Server) adminHandler(withPprof bool) http.Handler {
	mux := http.NewServeMux()
	if withPprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true, "sessions": s.idx.count(), "traces": s.Traces()})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /traces", func(w http.ResponseWriter, r *http.Request) {
		var a Alias
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		if err := dec.Decode(&a); err != nil {
			httpError(w, http.StatusBadRequest, "POST /traces: body is not an Alias JSON object: %v", err)
			return
		}
		if !trace.ValidID(a.Trace) {
			httpError(w, http.StatusBadRequest, "POST /traces: trace %q is not a valid trace id (1-64 of [0-9A-Za-z._-])", a.Trace)
			return
		}
		if a.Recording == "" {
			httpError(w, http.StatusBadRequest, "POST /traces: recording is empty")
			return
		}
		if err := s.traces.setAlias(a.Trace, a.Recording); err != nil {
			s.metrics.aliasesRefused.Inc()
			s.log.Warn("alias refused", "err", err)
			httpError(w, http.StatusServiceUnavailable, "POST /traces: trace %q: %v", a.Trace, err)
			return
		}
		if s.idx.session(a.Recording) == nil && s.cfg.Lookup == nil {
			// Still registered: the recording may be loaded later.
			s.log.Warn("alias to a recording that is not loaded", "trace", a.Trace, "recording", a.Recording)
		}
		writeJSON(w, http.StatusOK, a)
	})
	mux.HandleFunc("DELETE /traces/{trace}", func(w http.ResponseWriter, r *http.Request) {
		s.traces.forget(r.PathValue("trace"))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /traces/{trace}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("trace")
		ts, rec := s.traces.lookup(id)
		writeJSON(w, http.StatusOK, s.report(ts, id, rec))
	})
	mux.HandleFunc("GET /destinations", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Destinations())
	})
	mux.HandleFunc("GET /missing", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.traces.missingList())
	})
	if s.cfg.AdminToken == "" {
		return mux
	}
	want := []byte("Bearer " + s.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && r.Method == http.MethodGet {
			mux.ServeHTTP(w, r) // for probes: counts only
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			s.metrics.unauthorized.Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="retrace mock admin"`)
			httpError(w, http.StatusUnauthorized, "%s %s: missing or wrong admin token (send Authorization: Bearer TOKEN)", r.Method, r.URL.Path)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}
