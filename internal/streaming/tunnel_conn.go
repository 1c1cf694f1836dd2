package streaming

import (
	"errors"
	"io"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
)

// wsTunnel carries a byte stream in a WebSocket's binary messages, one
// write a message, as client-go's portforward.TunnelingConnection does (the
// other end of a tunnelled port-forward is one). It is here rather than
// imported: that package brought client-go's REST client and
// k8s.io/api/core/v1 into podbayd.
type wsTunnel struct {
	ws        *gwebsocket.Conn
	cur       io.Reader // the message being read; nil between messages
	closeOnce sync.Once
}

var errTunnelMessage = errors.New("port-forward tunnel: non-binary WebSocket message")

// Read reads the current message, then the next; a normal close is EOF.
func (t *wsTunnel) Read(p []byte) (int, error) {
	for {
		if t.cur == nil {
			kind, r, err := t.ws.NextReader()
			if err != nil {
				var ce *gwebsocket.CloseError
				if errors.As(err, &ce) && ce.Code == gwebsocket.CloseNormalClosure {
					return 0, io.EOF
				}
				return 0, err
			}
			if kind != gwebsocket.BinaryMessage {
				return 0, errTunnelMessage
			}
			t.cur = r
		}
		n, err := t.cur.Read(p)
		if n == 0 && errors.Is(err, io.EOF) {
			t.cur = nil
			continue
		}
		if errors.Is(err, io.EOF) {
			t.cur, err = nil, nil
		}
		return n, err
	}
}

// Write sends p as one binary message.
func (t *wsTunnel) Write(p []byte) (int, error) {
	if err := t.ws.WriteMessage(gwebsocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close sends a normal close and closes the connection, once.
func (t *wsTunnel) Close() error {
	var err error
	t.closeOnce.Do(func() {
		msg := gwebsocket.FormatCloseMessage(gwebsocket.CloseNormalClosure, "")
		werr := t.ws.WriteControl(gwebsocket.CloseMessage, msg, time.Now().Add(time.Second))
		err = t.ws.Close()
		if err == nil {
			err = werr
		}
	})
	return err
}
