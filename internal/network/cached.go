package network

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"
	"golang.org/x/sys/unix"
)

// CachedAttachment is a pod libcni holds cached ADD results for in CacheDir:
// its networks were added and not yet deleted.
type CachedAttachment struct {
	// ID is the CNI container ID, podbay's sandbox ID.
	ID string
	// NetNS is the namespace path recorded at ADD.
	NetNS string
	// Networks are the names of the networks added, "cni-loopback" included.
	Networks []string
}

// Cached lists the attachments libcni has cached results for in CacheDir, in
// ID order. After a restart the daemon tears down, with TeardownCached, those
// no sandbox record owns.
func (m *Manager) Cached() ([]CachedAttachment, error) {
	atts, err := m.cni.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("read cni cache: %w", err)
	}
	var out []CachedAttachment
	index := map[string]int{}
	for _, a := range atts {
		i, ok := index[a.ContainerID]
		if !ok {
			i = len(out)
			index[a.ContainerID] = i
			out = append(out, CachedAttachment{ID: a.ContainerID})
		}
		c := &out[i]
		c.Networks = append(c.Networks, a.Network)
		if c.NetNS == "" || a.Network != loopbackNetwork {
			c.NetNS = a.NetNS
		}
	}
	slices.SortFunc(out, func(a, b CachedAttachment) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// TeardownCached runs CNI DEL for every network cached for c.ID, with the
// cached configs and arguments, in the recorded namespace when it is still
// one, else with no namespace. It is idempotent: with nothing cached it
// returns nil.
func (m *Manager) TeardownCached(ctx context.Context, c CachedAttachment) error {
	if err := utils.ValidateContainerID(c.ID); err != nil {
		return fmt.Errorf("cni teardown %q: %s", c.ID, err.Msg)
	}
	atts, err := m.cni.GetCachedAttachments(c.ID)
	if err != nil {
		return fmt.Errorf("cni teardown %s: read cache: %w", c.ID, err)
	}
	var errs []error
	for _, a := range orderForDel(atts) {
		errs = append(errs, m.delCached(ctx, a, usableNetNS(a.NetNS)))
	}
	return errors.Join(errs...)
}

// usableNetNS returns path when it is a mounted network namespace, else "".
// A pinned namespace file that was unmounted (Stop keeps the file) or that
// did not survive a reboot cannot be entered; plugins fail on such a path
// with an error other than "not found", so DEL runs without a namespace,
// which the CNI spec allows.
func usableNetNS(path string) string {
	if path == "" {
		return ""
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil || st.Type != unix.NSFS_MAGIC {
		return ""
	}
	return path
}

// validateIfName checks an interface name the way libcni does before ADD.
func validateIfName(name string) error {
	if err := utils.ValidateInterfaceName(name); err != nil {
		return errors.New(err.Msg)
	}
	return nil
}
