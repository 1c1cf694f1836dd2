package main

import (
	"net/http"
	"net/http/pprof"
)

// handlePprof serves Go's runtime profiles (heap, goroutines, CPU…) under
// /debug/pprof/ on mux, the metrics endpoint's: `go tool pprof
// http://<metrics_address>/debug/pprof/heap`. Only with debug_pprof set,
// as the profiles show the daemon's internals to whoever reaches the port.
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
