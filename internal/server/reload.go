package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podbay/podbay/internal/config"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/image"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/runtime"
	"github.com/podbay/podbay/internal/store"
)

// A reload (SIGHUP) applies a new configuration to the running server. What
// it changes is published as one immutable liveConfig: an RPC loads it once
// and keeps the runtime it resolved, whatever a reload does meanwhile.

// liveConfig is the configuration in effect and the runtime handlers set
// up from it. It is never modified once stored.
type liveConfig struct {
	// cfg is the applied configuration: the running daemon's values for
	// keys that need a restart, the reloaded ones for the rest.
	cfg *config.Config
	// runtimes are the usable handlers; unavailable the configured ones
	// that could not be set up, with the reason.
	runtimes    map[string]runtime.Runtime
	unavailable map[string]error
	// caps are what each of runtimes offers beyond runtime.Runtime,
	// found once when the configuration is made (newLiveConfig,
	// sealed).
	caps map[string]runtime.Capabilities
}

// newLiveConfig returns the configuration of cfg with these handlers.
func newLiveConfig(cfg *config.Config, runtimes map[string]runtime.Runtime, unavailable map[string]error) *liveConfig {
	l := &liveConfig{cfg: cfg, runtimes: runtimes, unavailable: unavailable}
	l.seal()
	return l
}

// seal finds the capabilities of the handlers; a configuration is sealed
// before it is put in effect.
func (l *liveConfig) seal() {
	l.caps = make(map[string]runtime.Capabilities, len(l.runtimes))
	for name, rt := range l.runtimes {
		l.caps[name] = runtime.CapabilitiesOf(rt)
	}
}

// capabilities are what handler's runtime offers beyond runtime.Runtime;
// none for an unknown handler.
func (l *liveConfig) capabilities(handler string) runtime.Capabilities {
	return l.caps[handler]
}

// current returns the configuration in effect.
func (s *Server) current() *liveConfig { return s.live.Load() }

func (l *liveConfig) runtimeFor(handler string) (runtime.Runtime, error) {
	if rt, ok := l.runtimes[handler]; ok {
		return rt, nil
	}
	if err, ok := l.unavailable[handler]; ok {
		return nil, fmt.Errorf("runtime handler %q is not available: %v: %w", handler, err, errdefs.ErrInvalidArgument)
	}
	return nil, fmt.Errorf("unknown runtime handler %q: %w", handler, errdefs.ErrInvalidArgument)
}

// sandboxController is the controller of handler's pods, over its runtime.
func (l *liveConfig) sandboxController(handler string) (podsandbox.Controller, error) {
	rt, err := l.runtimeFor(handler)
	if err != nil {
		return nil, err
	}
	return podsandbox.ForHandler(l.cfg.Runtimes[handler].Type, rt), nil
}

// ReloadHooks are what Reload needs from the daemon to set up what a new
// configuration names. A nil hook refuses the changes that need it.
type ReloadHooks struct {
	// NewRuntime sets up handler name of cfg.
	NewRuntime func(cfg *config.Config, name string) (runtime.Runtime, error)
	// NewNetwork sets up the pod network of cfg.
	NewNetwork func(cfg *config.Config) (NetworkManager, error)
	// SetLogLevel applies cfg.LogLevel to the daemon's loggers.
	SetLogLevel func(level string)
}

// reloadState serializes reloads and tracks what they must not take away.
type reloadState struct {
	hooks ReloadHooks
	// mu is held by a reload, and shared by an RPC while it resolves a
	// handler and takes a hold on it (acquireRuntime), so that a reload
	// sees every hold taken on the configuration it replaces.
	mu sync.RWMutex
	// retired are handler instances a reload replaced while pods used
	// them: their exit watchers still serve those pods. Closed by
	// CloseRuntimes. Guarded by mu.
	retired []runtime.Runtime
	holdMu  sync.Mutex
	holds   map[string]int // RunPodSandbox calls at work, by handler; guarded by holdMu
	last    atomic.Pointer[ReloadResult]
}

// runtimeLease is a handler resolved for a new pod; until release, a
// reload neither removes the handler nor closes the runtime.
type runtimeLease struct {
	handler string
	rt      runtime.Runtime
	caps    runtime.Capabilities
	config  config.Runtime
	release func()
}

// acquireRuntime resolves the handler a new pod asked for ("" is the
// default) and holds it until the lease is released.
func (s *Server) acquireRuntime(requested string) (runtimeLease, error) {
	s.reload.mu.RLock()
	defer s.reload.mu.RUnlock()
	cur := s.current()
	name := requested
	if name == "" {
		name = cur.cfg.DefaultRuntime
	}
	rt, err := cur.runtimeFor(name)
	if err != nil {
		return runtimeLease{}, err
	}
	s.reload.holdMu.Lock()
	if s.reload.holds == nil {
		s.reload.holds = map[string]int{}
	}
	s.reload.holds[name]++
	s.reload.holdMu.Unlock()
	var once sync.Once
	return runtimeLease{handler: name, rt: rt, caps: cur.capabilities(name), config: cur.cfg.Runtimes[name], release: func() {
		once.Do(func() {
			s.reload.holdMu.Lock()
			defer s.reload.holdMu.Unlock()
			if s.reload.holds[name]--; s.reload.holds[name] <= 0 {
				delete(s.reload.holds, name)
			}
		})
	}}, nil
}

// handlersInUse returns the handlers some pod or container uses: a record
// names it (a pod being made, running, stopped or half undone), or a
// RunPodSandbox holds it. Called with reload.mu held.
func (s *Server) handlersInUse(ctx context.Context) (map[string]bool, error) {
	used := map[string]bool{}
	s.reload.holdMu.Lock()
	for name := range s.reload.holds {
		used[name] = true
	}
	s.reload.holdMu.Unlock()
	for _, bucket := range []string{sandboxBucket, containerBucket} {
		bad, err := s.db.ForEach(bucket, func(r store.Record) error {
			var rec struct {
				RuntimeHandler string `json:"runtimeHandler"`
			}
			if json.Unmarshal(r.Data, &rec) == nil && rec.RuntimeHandler != "" {
				used[rec.RuntimeHandler] = true
			}
			return nil
		})
		for _, k := range bad {
			log.G(ctx).Error("quarantined unreadable record", "bucket", bucket, "id", k)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", bucket, err)
		}
	}
	return used, nil
}

// ReloadResult is what a reload did; Status shows the last one.
type ReloadResult struct {
	Time time.Time `json:"time"`
	// Error is why nothing changed (an invalid configuration file).
	Error string `json:"error,omitempty"`
	// Applied are the changes in effect, Refused those that were not
	// applied and why, RestartNeeded those that take effect at the next
	// start.
	Applied       []string `json:"applied,omitempty"`
	Refused       []string `json:"refused,omitempty"`
	RestartNeeded []string `json:"restartNeeded,omitempty"`
}

// LastReload returns the result of the last reload, nil before the first.
func (s *Server) LastReload() *ReloadResult { return s.reload.last.Load() }

// Reload applies the configuration load returns: runtime handlers added,
// changed and removed, the default handler, the pause image, the
// registries.conf and policy.json paths, the CNI settings, the log level
// and sandbox_timeout. A handler that pods use is not removed, and neither
// its root nor its type changes; a vm handler in use keeps its shim
// settings (its pods' shims are connected to the running instance). What
// needs a restart is named in a warning. An error from load (an invalid
// file) changes nothing. Everything is logged, and the result kept for
// Status.
func (s *Server) Reload(ctx context.Context, load func() (*config.ReloadPlan, error)) ReloadResult {
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	res := ReloadResult{Time: time.Now()}
	defer func() { s.reload.last.Store(&res) }()
	plan, err := load()
	if err != nil {
		res.Error = err.Error()
		log.G(ctx).Error("configuration not reloaded; nothing changed", "err", err)
		return res
	}
	for _, c := range plan.Restart {
		res.RestartNeeded = append(res.RestartNeeded, c.String())
	}
	if len(plan.Restart) > 0 {
		log.G(ctx).Warn("configuration changes need a restart; running with the old values",
			"keys", strings.Join(res.RestartNeeded, "; "))
	}

	old := s.current()
	a := &applier{s: s, ctx: ctx, old: old, res: &res, next: &liveConfig{
		cfg:         plan.Config.Clone(),
		runtimes:    maps.Clone(old.runtimes),
		unavailable: maps.Clone(old.unavailable),
	}}
	if a.next.unavailable == nil {
		a.next.unavailable = map[string]error{}
	}
	if err := a.runtimes(); err != nil {
		res.Error = err.Error()
		log.G(ctx).Error("configuration not reloaded; nothing changed", "err", err)
		a.discard()
		return res
	}
	a.defaultRuntime()
	a.pauseImage()
	newNet := a.network()

	a.next.seal()
	s.live.Store(a.next)
	if newNet != nil {
		s.network.set(newNet)
	}
	c := a.next.cfg.Image
	s.images.SetRegistries(image.Registries{Conf: c.RegistriesConf, ConfDir: c.RegistriesConfDir, Policy: c.SignaturePolicy})
	if s.reload.hooks.SetLogLevel != nil {
		s.reload.hooks.SetLogLevel(a.next.cfg.LogLevel)
	}
	for _, rt := range a.closeAfter {
		closeRuntime(ctx, rt)
	}
	s.reload.retired = append(s.reload.retired, a.retire...)
	if a.next.cfg.PauseImage != old.cfg.PauseImage {
		s.WarmPauseImage()
	}

	for _, c := range config.Diff(old.cfg, a.next.cfg) {
		entry := c.String()
		if name, ok := strings.CutPrefix(c.Key, "runtimes."); ok && c.Op == config.ChangeAdded {
			if err := a.next.unavailable[name]; err != nil {
				entry += " (unavailable: " + err.Error() + ")"
			}
		}
		res.Applied = append(res.Applied, entry)
	}
	log.G(ctx).Info("configuration reloaded",
		"applied", summary(res.Applied), "refused", summary(res.Refused), "restartNeeded", summary(res.RestartNeeded))
	return res
}

func summary(items []string) string {
	if len(items) == 0 {
		return "nothing"
	}
	return strings.Join(items, "; ")
}

// applier builds the next liveConfig of one reload.
type applier struct {
	s    *Server
	ctx  context.Context
	old  *liveConfig
	next *liveConfig
	res  *ReloadResult
	// made are the runtimes this reload set up; closeAfter the old ones
	// to close once the next configuration is published; retire the old
	// ones pods still use.
	made, closeAfter, retire []runtime.Runtime
}

func (a *applier) refuse(key, why string) {
	a.res.Refused = append(a.res.Refused, key+": "+why)
	log.G(a.ctx).Warn("configuration change refused; keeping the running value", "key", key, "reason", why)
}

// keepHandler puts handler name back as the running configuration has it.
func (a *applier) keepHandler(name string) {
	if rc, ok := a.old.cfg.Runtimes[name]; ok {
		a.next.cfg.Runtimes[name] = rc
	} else {
		delete(a.next.cfg.Runtimes, name)
	}
	if rt, ok := a.next.runtimes[name]; ok && rt != a.old.runtimes[name] {
		a.unmake(rt)
	}
	delete(a.next.runtimes, name)
	delete(a.next.unavailable, name)
	if rt, ok := a.old.runtimes[name]; ok {
		a.next.runtimes[name] = rt
		a.closeAfter = slices.DeleteFunc(a.closeAfter, func(r runtime.Runtime) bool { return r == rt })
		a.retire = slices.DeleteFunc(a.retire, func(r runtime.Runtime) bool { return r == rt })
	}
	if err, ok := a.old.unavailable[name]; ok {
		a.next.unavailable[name] = err
	}
}

// unmake closes a runtime this reload set up and no longer publishes.
func (a *applier) unmake(rt runtime.Runtime) {
	a.made = slices.DeleteFunc(a.made, func(r runtime.Runtime) bool { return r == rt })
	closeRuntime(a.ctx, rt)
}

// discard undoes a reload that publishes nothing.
func (a *applier) discard() {
	for _, rt := range a.made {
		closeRuntime(a.ctx, rt)
	}
}

func (a *applier) newRuntime(name string) (runtime.Runtime, error) {
	if a.s.reload.hooks.NewRuntime == nil {
		return nil, errors.New("this server cannot set up runtime handlers")
	}
	rt, err := a.s.reload.hooks.NewRuntime(a.next.cfg, name)
	if err != nil {
		return nil, err
	}
	a.made = append(a.made, rt)
	return rt, nil
}

// instanceKeysEqual reports whether two handler configurations can share
// a runtime instance: they differ at most in what the server reads per
// pod (annotations, network order and its rule).
func instanceKeysEqual(a, b config.Runtime) bool {
	a.PodAnnotations, a.ContainerAnnotations, a.NetworkOrder = nil, nil, ""
	b.PodAnnotations, b.ContainerAnnotations, b.NetworkOrder = nil, nil, ""
	a.RequiresNetworkBeforeStart, a.AllowNetworkAfter = false, false
	b.RequiresNetworkBeforeStart, b.AllowNetworkAfter = false, false
	return reflect.DeepEqual(a, b)
}

// runtimes works out the handlers of the next configuration.
func (a *applier) runtimes() error {
	inUse, err := a.s.handlersInUse(a.ctx)
	if err != nil {
		return err
	}
	names := maps.Clone(a.old.cfg.Runtimes)
	maps.Copy(names, a.next.cfg.Runtimes)
	for _, name := range slices.Sorted(maps.Keys(names)) {
		key := "runtimes." + name
		oldRC, hadOld := a.old.cfg.Runtimes[name]
		newRC, hasNew := a.next.cfg.Runtimes[name]
		oldRT, running := a.old.runtimes[name]
		switch {
		case !hasNew:
			if inUse[name] {
				a.refuse(key, "not removed: pods use it")
				a.keepHandler(name)
				continue
			}
			delete(a.next.runtimes, name)
			delete(a.next.unavailable, name)
			if running {
				a.closeAfter = append(a.closeAfter, oldRT)
			}
			log.G(a.ctx).Info("runtime handler removed", "handler", name)
		case !hadOld || !running:
			// New, or unavailable until now: set it up as at start.
			rt, err := a.newRuntime(name)
			if err != nil {
				a.next.unavailable[name] = err
				delete(a.next.runtimes, name)
				log.G(a.ctx).Warn("runtime handler unavailable", "handler", name, "err", err)
				continue
			}
			a.next.runtimes[name] = rt
			delete(a.next.unavailable, name)
			log.G(a.ctx).Info("runtime handler ready", "handler", name, "type", newRC.Type)
		case reflect.DeepEqual(oldRC, newRC) || instanceKeysEqual(oldRC, newRC):
			// The instance stays; annotations and network order are
			// read per pod.
		default:
			if inUse[name] {
				if oldRC.Root != newRC.Root || oldRC.Type != newRC.Type {
					a.refuse(key, "root and type cannot change while pods use it (their state is under the old root)")
					a.keepHandler(name)
					continue
				}
				if podsandbox.KindFor(newRC.Type).Traits().BoundToInstance {
					a.refuse(key, "a vm handler's settings cannot change while pods use it (their shims are connected to the running instance)")
					a.keepHandler(name)
					continue
				}
			}
			rt, err := a.newRuntime(name)
			if err != nil {
				if inUse[name] {
					a.refuse(key, "set up: "+err.Error())
					a.keepHandler(name)
					continue
				}
				a.next.unavailable[name] = err
				delete(a.next.runtimes, name)
				a.closeAfter = append(a.closeAfter, oldRT)
				log.G(a.ctx).Warn("runtime handler unavailable", "handler", name, "err", err)
				continue
			}
			a.next.runtimes[name] = rt
			if inUse[name] {
				// The running pods' exit watchers wait on the old
				// instance; an oci runtime keeps no state in memory, so
				// both drive the same containers.
				a.retire = append(a.retire, oldRT)
			} else {
				a.closeAfter = append(a.closeAfter, oldRT)
			}
			log.G(a.ctx).Info("runtime handler replaced", "handler", name, "type", newRC.Type)
		}
	}
	return nil
}

// defaultRuntime keeps the running default when the new one cannot serve.
func (a *applier) defaultRuntime() {
	name := a.next.cfg.DefaultRuntime
	if _, ok := a.next.runtimes[name]; ok {
		return
	}
	why := fmt.Sprintf("handler %q is not available", name)
	if err := a.next.unavailable[name]; err != nil {
		why += ": " + err.Error()
	}
	prev := a.old.cfg.DefaultRuntime
	if name != prev {
		a.refuse("default_runtime", why)
		a.next.cfg.DefaultRuntime = prev
	} else {
		a.refuse("runtimes."+name, "the default handler must stay available: "+why)
	}
	if _, ok := a.next.runtimes[prev]; !ok {
		a.keepHandler(prev)
	}
}

// pauseImage pins the new pause image; new pods use it.
func (a *applier) pauseImage() {
	ref := a.next.cfg.PauseImage
	if ref == a.old.cfg.PauseImage {
		return
	}
	if err := a.s.images.SetPinned([]string{ref}); err != nil {
		a.refuse("pause_image", err.Error())
		a.next.cfg.PauseImage = a.old.cfg.PauseImage
	}
}

// network sets up the pod network anew when a CNI setting changed; new
// pods use it. It returns nil when nothing changed or the change was
// refused.
func (a *applier) network() NetworkManager {
	if reflect.DeepEqual(a.old.cfg.Network, a.next.cfg.Network) {
		return nil
	}
	var err error
	var m NetworkManager
	if a.s.reload.hooks.NewNetwork == nil {
		err = errors.New("this server cannot set up the pod network")
	} else {
		m, err = a.s.reload.hooks.NewNetwork(a.next.cfg)
	}
	if err != nil {
		for _, c := range config.Diff(a.old.cfg, a.next.cfg) {
			if strings.HasPrefix(c.Key, "network.") {
				a.refuse(c.Key, err.Error())
			}
		}
		a.next.cfg.Network = a.old.cfg.Network
		return nil
	}
	o, n := a.old.cfg.Network, a.next.cfg.Network
	if o.DefaultName != n.DefaultName || o.DefaultBridge != n.DefaultBridge || o.DefaultSubnet != n.DefaultSubnet {
		// podbay's own default conflist follows its settings; an
		// operator's is left alone.
		if err := m.UpdatePodCIDR(a.ctx, n.DefaultSubnet); err != nil {
			log.G(a.ctx).Warn("rewrite the default cni network config", "err", err)
		}
	}
	return m
}

func closeRuntime(ctx context.Context, rt runtime.Runtime) {
	if err := rt.Close(); err != nil {
		log.G(ctx).Warn("close runtime handler", "err", err)
	}
}

// CloseRuntimes closes every runtime handler instance the server holds,
// those a reload replaced included. Containers keep running. The daemon
// calls it once the server is shut down.
func (s *Server) CloseRuntimes() error {
	s.reload.mu.Lock()
	defer s.reload.mu.Unlock()
	var errs []error
	for _, rt := range append(slices.Collect(maps.Values(s.current().runtimes)), s.reload.retired...) {
		errs = append(errs, rt.Close())
	}
	s.reload.retired = nil
	return errors.Join(errs...)
}
