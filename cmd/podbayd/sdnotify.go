package main

import (
	"context"

	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/sdnotify"
)

// notifySocket is systemd's $NOTIFY_SOCKET (Type=notify), taken out of the
// environment before anything runs conmon or runc: see sdnotify.FromEnv.
var notifySocket = sdnotify.FromEnv()

// notify tells systemd the daemon's state; a failure is logged, not fatal
// (with no listener systemd times the start out anyway).
func notify(ctx context.Context, state string) {
	sent, err := notifySocket.Notify(state)
	if err != nil {
		log.G(ctx).Warn("notify the service manager", "state", state, "err", err)
		return
	}
	if sent {
		log.G(ctx).Info("notified the service manager", "state", state)
	}
}
