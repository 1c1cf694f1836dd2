package live

import (
	"context"
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
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/runtime"
)

// State is a server's live configuration and what its reloads keep track
// of. The zero value is not usable; see NewState.
type State struct {
	cur atomic.Pointer[Config]
	// mu is held by a reload, and shared by an RPC while it resolves a
	// handler and takes a hold on it (Acquire), so that a reload sees
	// every hold taken on the configuration it replaces.
	mu sync.RWMutex
	// retired are handler instances a reload replaced while pods used
	// them: their exit watchers still serve those pods. Closed by Close.
	// Guarded by mu.
	retired []runtime.Runtime
	holdMu  sync.Mutex
	holds   map[string]int // pods being made, by handler; guarded by holdMu
	last    atomic.Pointer[Result]
}

// NewState returns the state of a server started with c.
func NewState(c *Config) *State {
	s := &State{}
	s.cur.Store(c)
	return s
}

// Current returns the configuration in effect.
func (s *State) Current() *Config { return s.cur.Load() }

// Last returns the result of the last reload, nil before the first.
func (s *State) Last() *Result { return s.last.Load() }

// Lease is a handler resolved for a new pod; until Release, a reload
// neither removes the handler nor closes its runtime.
type Lease struct {
	Handler string
	Runtime runtime.Runtime
	// Capabilities are the runtime's beyond runtime.Runtime.
	Capabilities runtime.Capabilities
	Config       config.Runtime
	release      func()
}

// Release gives the handler back; a second call does nothing.
func (l Lease) Release() { l.release() }

// Acquire resolves the handler a new pod asked for ("" is the default)
// and holds it until the lease is released.
func (s *State) Acquire(requested string) (Lease, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	cur := s.Current()
	name := requested
	if name == "" {
		name = cur.cfg.DefaultRuntime
	}
	rt, err := cur.Runtime(name)
	if err != nil {
		return Lease{}, err
	}
	s.holdMu.Lock()
	if s.holds == nil {
		s.holds = map[string]int{}
	}
	s.holds[name]++
	s.holdMu.Unlock()
	var once sync.Once
	return Lease{Handler: name, Runtime: rt, Capabilities: cur.Capabilities(name), Config: cur.cfg.Runtimes[name], release: func() {
		once.Do(func() {
			s.holdMu.Lock()
			defer s.holdMu.Unlock()
			if s.holds[name]--; s.holds[name] <= 0 {
				delete(s.holds, name)
			}
		})
	}}, nil
}

// Env is what a reload needs from the server to set up and apply what the
// next configuration names.
type Env struct {
	// NewRuntime sets up handler name of cfg; nil refuses new and
	// changed handlers.
	NewRuntime func(cfg *config.Config, name string) (runtime.Runtime, error)
	// Recorded returns the handlers some record names (a pod being made,
	// running, stopped or half undone); it is called with the reload's
	// lock held.
	Recorded func(ctx context.Context) (map[string]bool, error)
	// PinPauseImage pins the new pause image; its error refuses the
	// change.
	PinPauseImage func(ref string) error
	// NewNetwork sets up the pod network of next, whose CNI settings
	// differ from old's; commit puts it in effect once next is published.
	// nil refuses the change.
	NewNetwork func(ctx context.Context, old, next *config.Config) (commit func(), err error)
	// Published applies what else next changes, once it is in effect
	// (the registries, the log level, the pause image).
	Published func(old, next *config.Config)
}

// Result is what a reload did; Status shows the last one.
type Result struct {
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

// Reload applies the configuration load returns: runtime handlers added,
// changed and removed, the default handler, the pause image and the CNI
// settings, then what env.Published applies. A handler that pods use is not
// removed, and neither its root nor its type changes; a vm handler in use
// keeps its settings (its pods' shims are connected to the running
// instance). What needs a restart is named in a warning. An error from
// load (an invalid file) changes nothing. Everything is logged, and the
// result kept (Last).
func (s *State) Reload(ctx context.Context, load func() (*config.ReloadPlan, error), env Env) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := Result{Time: time.Now()}
	defer func() { s.last.Store(&res) }()
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

	old := s.Current()
	a := &applier{s: s, env: env, ctx: ctx, old: old, res: &res, next: &Config{
		cfg:         plan.Config.Clone(),
		runtimes:    maps.Clone(old.runtimes),
		unavailable: maps.Clone(old.unavailable),
	}}
	if a.next.runtimes == nil {
		a.next.runtimes = map[string]runtime.Runtime{}
	}
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
	commitNetwork := a.network()

	a.next.seal()
	s.cur.Store(a.next)
	if commitNetwork != nil {
		commitNetwork()
	}
	if env.Published != nil {
		env.Published(old.cfg, a.next.cfg)
	}
	for _, rt := range a.closeAfter {
		closeRuntime(ctx, rt)
	}
	s.retired = append(s.retired, a.retire...)

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

// Close closes every runtime handler instance the state holds, those a
// reload replaced included. Containers keep running. The daemon calls it
// once the server is shut down.
func (s *State) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, rt := range append(slices.Collect(maps.Values(s.Current().runtimes)), s.retired...) {
		errs = append(errs, rt.Close())
	}
	s.retired = nil
	return errors.Join(errs...)
}

// handlersInUse returns the handlers some pod or container uses: a record
// names it, or a pod being made holds it. Called with mu held.
func (s *State) handlersInUse(ctx context.Context, env Env) (map[string]bool, error) {
	used := map[string]bool{}
	if env.Recorded != nil {
		recorded, err := env.Recorded(ctx)
		if err != nil {
			return nil, err
		}
		maps.Copy(used, recorded)
	}
	s.holdMu.Lock()
	for name := range s.holds {
		used[name] = true
	}
	s.holdMu.Unlock()
	return used, nil
}

// applier builds the next Config of one reload.
type applier struct {
	s    *State
	env  Env
	ctx  context.Context
	old  *Config
	next *Config
	res  *Result
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
	if a.env.NewRuntime == nil {
		return nil, errors.New("this server cannot set up runtime handlers")
	}
	rt, err := a.env.NewRuntime(a.next.cfg, name)
	if err != nil {
		return nil, err
	}
	a.made = append(a.made, rt)
	return rt, nil
}

func closeRuntime(ctx context.Context, rt runtime.Runtime) {
	if err := rt.Close(); err != nil {
		log.G(ctx).Warn("close runtime handler", "err", err)
	}
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
	inUse, err := a.s.handlersInUse(a.ctx, a.env)
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
	if a.env.PinPauseImage == nil {
		return
	}
	if err := a.env.PinPauseImage(ref); err != nil {
		a.refuse("pause_image", err.Error())
		a.next.cfg.PauseImage = a.old.cfg.PauseImage
	}
}

// network sets up the pod network anew when a CNI setting changed; new
// pods use it. It returns what puts it in effect, nil when nothing changed
// or the change was refused.
func (a *applier) network() (commit func()) {
	if reflect.DeepEqual(a.old.cfg.Network, a.next.cfg.Network) {
		return nil
	}
	var err error
	if a.env.NewNetwork == nil {
		err = errors.New("this server cannot set up the pod network")
	} else {
		commit, err = a.env.NewNetwork(a.ctx, a.old.cfg, a.next.cfg)
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
	return commit
}
