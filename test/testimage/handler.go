package testimage

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
)

// realm is the basic-auth realm the registry announces.
const realm = "podbay-testimage"

// serveHTTP puts auth, counting, faults and the Range fix-up in front of the
// registry proper.
func (r *Registry) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if !r.authorized(req) {
		r.unauthorized.Add(1)
		w.Header().Set("WWW-Authenticate", `Basic realm="`+realm+`"`)
		writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
		return
	}
	if req.Method == http.MethodGet {
		switch classify(req.URL.Path) {
		case kindManifest:
			r.manifestGets.Add(1)
		case kindBlob:
			r.blobGets.Add(1)
			if !r.blobFault(w, req) {
				return
			}
			r.closeRange(req)
			if release, ok := r.midBlobStall(); ok {
				r.serveHalfThenStall(w, req, release)
				return
			}
		}
	}
	r.inner.ServeHTTP(w, req)
}

// authorized reports whether req carries the configured credentials, or
// none are configured.
func (r *Registry) authorized(req *http.Request) bool {
	if r.opts.Username == "" {
		return true
	}
	user, pass, ok := req.BasicAuth()
	if !ok {
		return false
	}
	userOK := subtle.ConstantTimeCompare([]byte(user), []byte(r.opts.Username)) == 1
	passOK := subtle.ConstantTimeCompare([]byte(pass), []byte(r.opts.Password)) == 1
	return userOK && passOK
}

// blobFault applies the fault in force to a blob GET and reports whether
// the GET should proceed. A stalled GET re-reads the fault once released.
func (r *Registry) blobFault(w http.ResponseWriter, req *http.Request) bool {
	for {
		r.mu.Lock()
		fault, release := r.fault, r.release
		r.mu.Unlock()
		switch fault {
		case FailBlobs:
			writeError(w, http.StatusInternalServerError, "UNKNOWN", "injected fault: blob download failed")
			return false
		case StallBlobs:
			if !r.stall(req, release) {
				// Abort, so the client sees a dropped connection rather
				// than an empty 200 that net/http would send for a handler
				// returning without writing.
				panic(http.ErrAbortHandler)
			}
		default:
			return true
		}
	}
}

// midBlobStall returns the release channel of StallMidBlob when it is in
// force.
func (r *Registry) midBlobStall() (<-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.release, r.fault == StallMidBlob
}

// serveHalfThenStall serves a blob GET's status, headers and the first
// half of its body, holds the rest until release, then sends it; if the
// client or Close ends the stall first, the connection is dropped.
func (r *Registry) serveHalfThenStall(w http.ResponseWriter, req *http.Request, release <-chan struct{}) {
	rec := httptest.NewRecorder()
	r.inner.ServeHTTP(rec, req)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	body := rec.Body.Bytes()
	half := len(body) / 2
	if _, err := w.Write(body[:half]); err != nil {
		return
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if !r.stall(req, release) {
		panic(http.ErrAbortHandler)
	}
	_, _ = w.Write(body[half:])
}

// stall waits for release and reports true, or for the client or Close and
// reports false.
func (r *Registry) stall(req *http.Request, release <-chan struct{}) bool {
	r.stalled.Add(1)
	defer r.stalled.Add(-1)
	select {
	case <-release:
		return true
	case <-req.Context().Done():
		return false
	case <-r.closed:
		return false
	}
}

// closeRange rewrites an open-ended "Range: bytes=N-" to "bytes=N-<last>".
// The registry parses only the closed form and answers 416 to the open one,
// which is what containers/image sends to resume a blob download after a
// dropped connection.
func (r *Registry) closeRange(req *http.Request) {
	rng := req.Header.Get("Range")
	if !strings.HasPrefix(rng, "bytes=") || !strings.HasSuffix(rng, "-") {
		return
	}
	start, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(rng, "bytes="), "-"), 10, 64)
	if err != nil || start < 0 {
		return
	}
	head := httptest.NewRequestWithContext(req.Context(), http.MethodHead, req.URL.Path, nil)
	rec := httptest.NewRecorder()
	r.inner.ServeHTTP(rec, head)
	if rec.Code != http.StatusOK {
		return
	}
	size, err := strconv.ParseInt(rec.Header().Get("Content-Length"), 10, 64)
	if err != nil || start >= size {
		return
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", start, size-1))
}

// kind is what a registry URL path addresses.
type kind int

const (
	kindOther kind = iota
	kindManifest
	kindBlob
)

// classify tells manifests (/v2/<name>/manifests/<ref>) and blobs
// (/v2/<name>/blobs/<digest>) from everything else, uploads included.
func classify(p string) kind {
	elems := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(elems) < 4 || elems[0] != "v2" {
		return kindOther
	}
	switch elems[len(elems)-2] {
	case "manifests":
		return kindManifest
	case "blobs":
		return kindBlob
	}
	return kindOther
}

// writeError writes a distribution-spec error body.
func writeError(w http.ResponseWriter, status int, code, message string) {
	type detail struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Errors []detail `json:"errors"`
	}{[]detail{{code, message}}})
}
