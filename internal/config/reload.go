package config

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Encode writes c as TOML with every key present, in the layout of the
// configuration file, so that the output loads back into the same
// configuration (`podbayd config`).
func (c *Config) Encode(w io.Writer) error {
	enc := toml.NewEncoder(w)
	enc.Indent = ""
	return enc.Encode(c)
}

// Map returns c as a map keyed by the configuration file's key names, the
// form `crictl info` shows.
func (c *Config) Map() (map[string]any, error) {
	var b bytes.Buffer
	if err := c.Encode(&b); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if _, err := toml.Decode(b.String(), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	out := *c
	out.Network.PluginDirs = slices.Clone(c.Network.PluginDirs)
	out.Image.DriverOptions = slices.Clone(c.Image.DriverOptions)
	if c.Runtimes != nil {
		out.Runtimes = make(map[string]Runtime, len(c.Runtimes))
		for name, rt := range c.Runtimes {
			rt.PodAnnotations = slices.Clone(rt.PodAnnotations)
			rt.ContainerAnnotations = slices.Clone(rt.ContainerAnnotations)
			out.Runtimes[name] = rt
		}
	}
	return &out
}

// Change operations.
const (
	ChangeModified = "modified"
	ChangeAdded    = "added"
	ChangeRemoved  = "removed"
)

// Change is one configuration key whose value differs between two
// configurations.
type Change struct {
	// Key is the key's TOML path: "log_level", "network.conf_dir",
	// "runtimes.kata.path"; a handler added or removed as a whole is
	// "runtimes.<name>".
	Key string `json:"key"`
	// Op is ChangeModified, ChangeAdded or ChangeRemoved.
	Op string `json:"op"`
	// Old and New are the values, as TOML would spell them; empty for a
	// handler added or removed.
	Old string `json:"old,omitempty"`
	New string `json:"new,omitempty"`
	// Live is set when the key takes effect without a restart.
	Live bool `json:"live"`
}

func (c Change) String() string {
	if c.Op != ChangeModified {
		return c.Key + " " + c.Op
	}
	return fmt.Sprintf("%s %s -> %s", c.Key, c.Old, c.New)
}

// liveKeys are the keys a reload applies to the running daemon; every key
// under [runtimes] is live as well (the server decides what it can apply
// to a handler in use). The rest need a restart: they name the daemon's
// sockets, directories and listeners, or are read once at start.
var liveKeys = map[string]bool{
	"log_level":                    true,
	"default_runtime":              true,
	"pause_image":                  true,
	"sandbox_timeout":              true,
	"sandbox_process":              true,
	"shm_size":                     true,
	"image.registries_conf":        true,
	"image.registries_conf_dir":    true,
	"image.signature_policy":       true,
	"image.signature_policy_dir":   true,
	"network.conf_dir":             true,
	"network.plugin_dirs":          true,
	"network.plugin_timeout":       true,
	"network.write_default_config": true,
	"network.default_network_name": true,
	"network.default_bridge":       true,
	"network.default_subnet":       true,
}

// IsLive reports whether key (a Change.Key) takes effect on reload.
func IsLive(key string) bool {
	return liveKeys[key] || key == "runtimes" || strings.HasPrefix(key, "runtimes.")
}

// Diff returns the keys whose values differ from a to b, sorted by key.
func Diff(a, b *Config) []Change {
	var out []Change
	walkKeys("", reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), func(key string, x, y reflect.Value) {
		if !reflect.DeepEqual(x.Interface(), y.Interface()) {
			out = append(out, Change{Key: key, Op: ChangeModified, Old: formatValue(x), New: formatValue(y), Live: IsLive(key)})
		}
	})
	for _, name := range slices.Sorted(maps.Keys(a.Runtimes)) {
		if _, ok := b.Runtimes[name]; !ok {
			out = append(out, Change{Key: "runtimes." + name, Op: ChangeRemoved, Live: true})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(b.Runtimes)) {
		x, ok := a.Runtimes[name]
		if !ok {
			out = append(out, Change{Key: "runtimes." + name, Op: ChangeAdded, Live: true})
			continue
		}
		y := b.Runtimes[name]
		walkKeys("runtimes."+name+".", reflect.ValueOf(&x).Elem(), reflect.ValueOf(&y).Elem(), func(key string, x, y reflect.Value) {
			if !reflect.DeepEqual(x.Interface(), y.Interface()) {
				out = append(out, Change{Key: key, Op: ChangeModified, Old: formatValue(x), New: formatValue(y), Live: true})
			}
		})
	}
	slices.SortStableFunc(out, func(p, q Change) int { return strings.Compare(p.Key, q.Key) })
	return out
}

// walkKeys calls fn for every key of the structs a and b (of one type),
// descending into tables; maps (the [runtimes] table) are left to the
// caller.
func walkKeys(prefix string, a, b reflect.Value, fn func(key string, x, y reflect.Value)) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Struct:
			walkKeys(prefix+name+".", a.Field(i), b.Field(i), fn)
		case reflect.Map:
		default:
			fn(prefix+name, a.Field(i), b.Field(i))
		}
	}
}

func formatValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return strconv.Quote(v.String())
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = formatValue(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if s, ok := v.Interface().(fmt.Stringer); ok {
		return strconv.Quote(s.String())
	}
	return fmt.Sprint(v.Interface())
}

// ReloadPlan is what a reload of the configuration file may apply.
type ReloadPlan struct {
	// Config is the new configuration, validated, with every key that
	// needs a restart kept at the running daemon's value.
	Config *Config
	// Restart lists the keys that differ from the running daemon's but
	// take effect only at the next start.
	Restart []Change
}

// PlanReload checks next, the configuration read again (file and flags,
// before Validate), and returns what of it a running daemon can apply.
// running is the configuration the daemon started with, also before
// Validate: keys that need a restart are compared with, and kept at, the
// values it started with, so that a value derived from one of them (a
// handler's root under state) does not change either. An invalid next is
// an error and nothing is to change.
func PlanReload(running, next *Config) (*ReloadPlan, error) {
	if err := next.Clone().Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	plan := &ReloadPlan{Config: next.Clone()}
	for _, c := range Diff(running, next) {
		if !c.Live {
			plan.Restart = append(plan.Restart, c)
		}
	}
	walkKeys("", reflect.ValueOf(plan.Config).Elem(), reflect.ValueOf(running.Clone()).Elem(), func(key string, x, y reflect.Value) {
		if !IsLive(key) {
			x.Set(y)
		}
	})
	if err := plan.Config.Validate(); err != nil {
		// A live key that is valid only with the new value of a key that
		// needs a restart.
		return nil, fmt.Errorf("invalid configuration with the running daemon's %s: %w", keysOf(plan.Restart), err)
	}
	return plan, nil
}

func keysOf(changes []Change) string {
	keys := make([]string, len(changes))
	for i, c := range changes {
		keys[i] = c.Key
	}
	return strings.Join(keys, ", ")
}
