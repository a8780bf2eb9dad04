package mockserver

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/retrace-dev/retrace/trace"
)

// Handler returns the admin API (see api.go), for serving on a listener of
// the caller's choice.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
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
		s.traces.setAlias(a.Trace, a.Recording)
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
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}
