package server

import (
	"context"
	"sync/atomic"

	"github.com/podbay/podbay/internal/network"
)

// swapNetwork is the server's NetworkManager: a reload replaces the one it
// delegates to. A call under way finishes on the one it started with.
type swapNetwork struct {
	cur atomic.Pointer[networkHolder]
}

type networkHolder struct{ NetworkManager }

func newSwapNetwork(m NetworkManager) *swapNetwork {
	n := &swapNetwork{}
	n.set(m)
	return n
}

func (n *swapNetwork) set(m NetworkManager)             { n.cur.Store(&networkHolder{m}) }
func (n *swapNetwork) get() NetworkManager              { return n.cur.Load().NetworkManager }
func (n *swapNetwork) Status(ctx context.Context) error { return n.get().Status(ctx) }
func (n *swapNetwork) UpdatePodCIDR(ctx context.Context, cidr string) error {
	return n.get().UpdatePodCIDR(ctx, cidr)
}
func (n *swapNetwork) Setup(ctx context.Context, att network.Attachment) (*network.Settings, error) {
	return n.get().Setup(ctx, att)
}
func (n *swapNetwork) Teardown(ctx context.Context, att network.Attachment) error {
	return n.get().Teardown(ctx, att)
}
func (n *swapNetwork) Cached() ([]network.CachedAttachment, error) { return n.get().Cached() }
func (n *swapNetwork) TeardownCached(ctx context.Context, c network.CachedAttachment) error {
	return n.get().TeardownCached(ctx, c)
}
func (n *swapNetwork) ConfigInUse(ctx context.Context) network.ConfigInUse {
	return n.get().ConfigInUse(ctx)
}
func (n *swapNetwork) ReleaseMasquerade(ctx context.Context) error {
	return n.get().ReleaseMasquerade(ctx)
}
