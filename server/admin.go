package server

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The admin listener: /healthz, /readyz and /metrics.

// adminHandler serves /healthz, /readyz and /metrics.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		status, body := s.readiness()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	return mux
}

// dataLoser is a store that can find that its backing store lost data.
type dataLoser interface{ DataLoss() string }

type readiness struct {
	Status   string            `json:"status"`
	Checks   map[string]string `json:"checks"`
	Degraded []string          `json:"degraded,omitempty"`
}

func (s *Server) readiness() (int, readiness) {
	rd := readiness{Status: "ready", Checks: map[string]string{"keystore": "loaded"}}
	status := http.StatusOK
	if !s.store.Ready() {
		rd.Checks["keystore"] = "not loaded"
		rd.Status, status = "not ready", http.StatusServiceUnavailable
	}
	if s.draining.Load() {
		rd.Checks["server"] = "draining"
		rd.Status, status = "draining", http.StatusServiceUnavailable
	}
	// In a fixed (sorted) order, so the body does not change between
	// requests while the state does not.
	for _, c := range []struct {
		name string
		c    any
	}{{"keystore_redis", s.store}, {"ratelimit", s.limiter}} {
		if l, ok := c.c.(dataLoser); ok && l.DataLoss() != "" {
			rd.Degraded = append(rd.Degraded, c.name+": Redis lost keystore data ("+l.DataLoss()+"); serving the last good set while this replica writes it back")
			continue
		}
		if d, ok := c.c.(degradable); ok && d.Degraded() {
			rd.Degraded = append(rd.Degraded, c.name+": redis unavailable, running on the outage policy")
		}
	}
	return status, rd
}
