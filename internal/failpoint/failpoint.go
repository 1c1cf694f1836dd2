// Package failpoint injects failures at named steps, for tests that prove
// every step's undo. A Set is parsed once at daemon start and handed to
// the server through its constructor; the empty (nil) Set does nothing and
// costs a nil check.
//
// Only a daemon built with the failpoints build tag arms failpoints from
// the PODBAY_FAILPOINTS environment variable (FromEnv); the integration
// tests build it so. A daemon built without the tag never reads it. Unit
// tests hand a parsed Set to the server directly.
//
// Syntax: "point=[N*]action[,point=...]" where action is "error", "kill"
// (the process SIGKILLs itself) or "sleep(DURATION)", and N limits the
// action to the first N hits.
package failpoint

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
)

// EnvVar names the environment variable a podbayd built with the
// failpoints tag reads failpoints from.
const EnvVar = "PODBAY_FAILPOINTS"

type action struct {
	kind      string // error, kill, sleep
	sleep     time.Duration
	remaining int // < 0: unlimited
}

// Set is a parsed set of failpoints. The zero value and nil are empty.
type Set struct {
	mu     sync.Mutex
	points map[string]*action // guarded by mu
}

// Parse parses a failpoint specification.
func Parse(spec string) (*Set, error) {
	s := &Set{points: map[string]*action{}}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, act, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("failpoint %q: want point=action", item)
		}
		a := &action{remaining: -1}
		if n, rest, ok := strings.Cut(act, "*"); ok {
			count, err := strconv.Atoi(n)
			if err != nil || count < 1 {
				return nil, fmt.Errorf("failpoint %q: bad count %q", item, n)
			}
			a.remaining, act = count, rest
		}
		switch {
		case act == "error", act == "kill":
			a.kind = act
		case strings.HasPrefix(act, "sleep(") && strings.HasSuffix(act, ")"):
			d, err := time.ParseDuration(act[len("sleep(") : len(act)-1])
			if err != nil {
				return nil, fmt.Errorf("failpoint %q: %w", item, err)
			}
			a.kind, a.sleep = "sleep", d
		default:
			return nil, fmt.Errorf("failpoint %q: unknown action %q", item, act)
		}
		s.points[name] = a
	}
	return s, nil
}

// Hit evaluates the failpoint name: it returns an error wrapping
// errdefs.ErrInjected, kills the process, sleeps (bounded by ctx), or does
// nothing.
func (s *Set) Hit(ctx context.Context, name string) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	a, ok := s.points[name]
	if !ok || a.remaining == 0 {
		s.mu.Unlock()
		return nil
	}
	if a.remaining > 0 {
		a.remaining--
	}
	kind, d := a.kind, a.sleep
	s.mu.Unlock()

	switch kind {
	case "kill":
		_ = syscall.Kill(syscall.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is delivered before this returns in practice.
	case "sleep":
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	return fmt.Errorf("failpoint %s: %w", name, errdefs.ErrInjected)
}
