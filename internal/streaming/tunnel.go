package streaming

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	gwebsocket "github.com/gorilla/websocket"
	kportforward "k8s.io/cri-streaming/pkg/streaming/portforward"

	"github.com/podbay/podbay/internal/log"
)

// Port-forward over WebSocket: client-go (`crictl --transport websocket
// port-forward`, kubectl) tunnels SPDY through a WebSocket whose
// subprotocol is "SPDY/3.1+portforward.k8s.io", as the API server
// accepts it. The kubelet's streaming server knows only plain SPDY for
// port-forward, so the tunnel is opened here: the SPDY upgrade is made on
// the in-process listener first (a bad token gets its HTTP answer), then
// the WebSocket is accepted and the bytes of the SPDY session are copied
// between the two.

// tunnelProtocol is the WebSocket subprotocol of a SPDY tunnel.
const tunnelProtocol = kportforward.WebsocketsSPDYTunnelingPortForwardV1

// isTunnel reports whether r asks for a port-forward through a SPDY tunnel.
func isTunnel(r *http.Request) bool {
	if sessionKind(r.URL.Path) != "portforward" {
		return false
	}
	for _, p := range gwebsocket.Subprotocols(r) {
		if p == tunnelProtocol {
			return true
		}
	}
	return false
}

// serveTunnel runs a port-forward session whose SPDY comes through a
// WebSocket.
func (s *Server) serveTunnel(w http.ResponseWriter, r *http.Request) {
	up, err := s.inproc.dial(r.Context(), "", "")
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer up.Close()
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: podbay-inproc\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: %s\r\n\r\n",
		r.URL.EscapedPath(), kportforward.PortForwardV1Name)
	if _, err := io.WriteString(up, req); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	br := bufio.NewReader(up)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		http.Error(w, strings.TrimSpace(string(body)), resp.StatusCode)
		return
	}
	upgrader := gwebsocket.Upgrader{
		Subprotocols: []string{tunnelProtocol},
		// The token in the URL is the credential, as for SPDY.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		log.G(r.Context()).Warn("websocket port-forward upgrade failed", "err", err)
		return
	}
	tunnel := &wsTunnel{ws: ws}
	defer tunnel.Close()
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			tunnel.Close()
			up.Close()
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, tunnel)
		closeBoth()
	}()
	_, _ = io.Copy(tunnel, br) // br: what the upgrade response's read buffered, then the rest
	closeBoth()
	<-done
}
