package systemd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// Manager is the daemon's one connection to systemd's D-Bus API (the
// private socket /run/systemd/private for root, as runc's). A call that
// finds the bus closed or disconnected (systemd re-executed, dbus
// restarted) reconnects and is tried once more. Safe for concurrent use.
type Manager struct {
	mu   sync.Mutex
	conn *sddbus.Conn
}

// NewManager connects to systemd.
func NewManager(ctx context.Context) (*Manager, error) {
	m := &Manager{}
	if _, err := m.get(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// Close drops the connection.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
	return nil
}

func (m *Manager) get(ctx context.Context) (*sddbus.Conn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn != nil && m.conn.Connected() {
		return m.conn, nil
	}
	if m.conn != nil {
		m.conn.Close()
		m.conn = nil
	}
	c, err := sddbus.NewWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to systemd over D-Bus: %w", err)
	}
	m.conn = c
	return c, nil
}

// reset drops c if it is still the current connection.
func (m *Manager) reset(c *sddbus.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conn == c {
		m.conn.Close()
		m.conn = nil
	}
}

// call runs fn on the connection, reconnecting once on a broken bus.
func (m *Manager) call(ctx context.Context, fn func(*sddbus.Conn) error) error {
	for attempt := 0; ; attempt++ {
		c, err := m.get(ctx)
		if err != nil {
			return err
		}
		err = fn(c)
		if err == nil || attempt > 0 || !brokenBus(err) {
			return err
		}
		m.reset(c)
	}
}

// brokenBus is true for the errors of a connection that is gone.
func brokenBus(err error) bool {
	if errors.Is(err, godbus.ErrClosed) {
		return true
	}
	var de godbus.Error
	return errors.As(err, &de) && de.Name == "org.freedesktop.DBus.Error.Disconnected"
}

// dbusErrorName returns the D-Bus error name of err, or "".
func dbusErrorName(err error) string {
	var de godbus.Error
	if errors.As(err, &de) {
		return de.Name
	}
	return ""
}

// noUnit is true for systemd's answers about a unit it does not know.
func noUnit(err error) bool {
	switch dbusErrorName(err) {
	case "org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.systemd1.LoadFailed":
		return true
	}
	return false
}

// waitJob waits for the job systemd reports on ch to end.
func waitJob(ctx context.Context, what string, ch <-chan string) error {
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("%s: systemd job %s", what, res)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
}

// StartScope puts pid in a new transient scope unit name (…​.scope) in
// slice, as CRI-O places conmon in crio-conmon-<id>.scope: Delegate=yes
// (the process may manage its own sub-cgroups), no default dependencies
// (it is not stopped with the daemon's unit, nor at shutdown before the
// containers), and collected when it ends however it ended. systemd
// stops the scope by itself once its last process exits.
func (m *Manager) StartScope(ctx context.Context, name, slice string, pid int, description string) error {
	props := []sddbus.Property{
		sddbus.PropSlice(slice),
		sddbus.PropPids(uint32(pid)),
		sddbus.PropDescription(description),
		{Name: "Delegate", Value: godbus.MakeVariant(true)},
		{Name: "DefaultDependencies", Value: godbus.MakeVariant(false)},
		{Name: "CollectMode", Value: godbus.MakeVariant("inactive-or-failed")},
	}
	return m.call(ctx, func(c *sddbus.Conn) error {
		ch := make(chan string, 1)
		if _, err := c.StartTransientUnitContext(ctx, name, "replace", props, ch); err != nil {
			return fmt.Errorf("start scope %s in %s for pid %d: %w", name, slice, pid, err)
		}
		return waitJob(ctx, "start scope "+name, ch)
	})
}

// StopUnit kills what is left in unit (SIGKILL to every process of its
// cgroup) and stops it, waiting for the stop job, then clears a failed
// state so that the unit is collected. A unit systemd does not know, or
// that is not running, counts as stopped.
func (m *Manager) StopUnit(ctx context.Context, unit string) error {
	return m.call(ctx, func(c *sddbus.Conn) error {
		state, err := unitState(ctx, c, unit)
		if err != nil {
			return err
		}
		if state == "" {
			return nil
		}
		if state == "active" || state == "activating" || state == "deactivating" || state == "reloading" {
			// A scope's stop sends SIGTERM and waits TimeoutStopSec (90s by
			// default) before SIGKILL: a cut-short create's "runc init"
			// gets SIGKILL at once.
			if err := c.KillUnitWithTarget(ctx, unit, sddbus.All, 9); err != nil && !noUnit(err) {
				return fmt.Errorf("kill %s: %w", unit, err)
			}
			ch := make(chan string, 1)
			if _, err := c.StopUnitContext(ctx, unit, "replace", ch); err != nil {
				if noUnit(err) {
					return nil
				}
				return fmt.Errorf("stop %s: %w", unit, err)
			}
			if err := waitJob(ctx, "stop "+unit, ch); err != nil {
				return err
			}
		}
		if err := c.ResetFailedUnitContext(ctx, unit); err != nil && !noUnit(err) &&
			dbusErrorName(err) != "org.freedesktop.systemd1.UnitNotFailed" {
			return fmt.Errorf("reset-failed %s: %w", unit, err)
		}
		return nil
	})
}

// UnitState returns unit's ActiveState ("active", "inactive", "failed"…),
// "" when systemd has no such unit loaded.
func (m *Manager) UnitState(ctx context.Context, unit string) (string, error) {
	var state string
	err := m.call(ctx, func(c *sddbus.Conn) error {
		var err error
		state, err = unitState(ctx, c, unit)
		return err
	})
	return state, err
}

func unitState(ctx context.Context, c *sddbus.Conn, unit string) (string, error) {
	units, err := c.ListUnitsByNamesContext(ctx, []string{unit})
	if err != nil {
		return "", fmt.Errorf("look up %s: %w", unit, err)
	}
	for _, u := range units {
		if u.Name == unit && u.LoadState != "not-found" {
			return u.ActiveState, nil
		}
	}
	return "", nil
}

// ScopeOOMKilled reports whether systemd saw the kernel OOM killer kill a
// process of scope unit: its Result is "oom-kill" (systemd ≥ 243 watches
// every unit's memory.events, and keeps a scope that failed so loaded
// until it is reset). It tells an OOM kill when the scope's cgroup is
// already gone: systemd removes a scope's cgroup as soon as its last
// process exits, before a shim or podbay can read memory.events there.
// A unit not loaded, or not failed for that, gives false. systemd 252
// sets Result only where the unit's OOMPolicy stops it (a scope of
// systemd-run, not one runc made whose last process was killed), so a
// false here does not rule an OOM kill out. settled is
// false while the scope is still active or deactivating: systemd has not
// yet seen the end of its processes (nor, maybe, the OOM event).
func (m *Manager) ScopeOOMKilled(ctx context.Context, unit string) (killed, settled bool, err error) {
	err = m.call(ctx, func(c *sddbus.Conn) error {
		state, err := unitState(ctx, c, unit)
		if err != nil || state == "" {
			settled = true
			return err
		}
		settled = state != "active" && state != "deactivating" && state != "activating"
		p, err := c.GetUnitTypePropertyContext(ctx, unit, "Scope", "Result")
		if err != nil {
			if noUnit(err) {
				return nil
			}
			return fmt.Errorf("result of %s: %w", unit, err)
		}
		res, _ := p.Value.Value().(string)
		killed = res == "oom-kill"
		return nil
	})
	return killed, settled, err
}
