package systemd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// IOWeight is a cgroup v2 io.weight entry as systemd's unit properties
// hold it: IOWeight for the default weight, IODeviceWeight for one device.
type IOWeight struct {
	// Device is "MAJ:MIN", or "" for the default weight.
	Device string
	Weight uint64
}

// ParseIOWeight parses a value written to io.weight: "N" or "default N"
// (the default weight), or "MAJ:MIN N" (one device's). A device's
// "MAJ:MIN default" (drop the override) has no property to say it, so it
// is refused, as are weights outside 1–10000.
func ParseIOWeight(v string) (IOWeight, error) {
	f := strings.Fields(v)
	var w IOWeight
	var num string
	switch len(f) {
	case 1:
		num = f[0]
	case 2:
		num = f[1]
		if f[0] != "default" {
			maj, min, ok := strings.Cut(f[0], ":")
			if _, err := strconv.ParseUint(maj, 10, 32); !ok || err != nil {
				return IOWeight{}, fmt.Errorf("io.weight %q: bad device %q", v, f[0])
			}
			if _, err := strconv.ParseUint(min, 10, 32); err != nil {
				return IOWeight{}, fmt.Errorf("io.weight %q: bad device %q", v, f[0])
			}
			w.Device = f[0]
		}
	default:
		return IOWeight{}, fmt.Errorf("io.weight %q: want \"[default|MAJ:MIN] WEIGHT\"", v)
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n < 1 || n > 10000 {
		return IOWeight{}, fmt.Errorf("io.weight %q: weight %q is not in 1-10000", v, num)
	}
	w.Weight = n
	return w, nil
}

// SetIOWeight sets unit's IOWeight (or, for a device, adds to its
// IODeviceWeight) for the runtime of the unit. runc and crun write a
// unified io.weight to the cgroup only, and systemd writes its own value
// back whenever it applies the unit's properties again (runc's update
// does): the weight lasts once systemd holds it too.
func (m *Manager) SetIOWeight(ctx context.Context, unit string, w IOWeight) error {
	prop := sddbus.Property{Name: "IOWeight", Value: godbus.MakeVariant(w.Weight)}
	if w.Device != "" {
		type deviceWeight struct {
			Path   string
			Weight uint64
		}
		prop = sddbus.Property{Name: "IODeviceWeight", Value: godbus.MakeVariant([]deviceWeight{{"/dev/block/" + w.Device, w.Weight}})}
	}
	return m.call(ctx, func(c *sddbus.Conn) error {
		if err := c.SetUnitPropertiesContext(ctx, unit, true, prop); err != nil {
			return fmt.Errorf("set %s of %s: %w", prop.Name, unit, err)
		}
		return nil
	})
}
