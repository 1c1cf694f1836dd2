package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/runtime"
)

// runtimeState is the JSON `runc state` prints, and `runc list --format
// json` prints a list of.
type runtimeState struct {
	ID      string    `json:"id"`
	Pid     int       `json:"pid"`
	Status  string    `json:"status"`
	Bundle  string    `json:"bundle"`
	Created time.Time `json:"created"`
}

// State asks the runtime about container id. An ID the runtime does not
// know gives an error wrapping errdefs.ErrNotFound.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	if err := runtime.ValidateID(id); err != nil {
		return runtime.State{}, err
	}
	out, err := r.runtimeCmd(ctx, "state", id)
	if err != nil {
		if r.isNotExist(err, id) {
			return runtime.State{}, fmt.Errorf("container %s: %w", id, errdefs.ErrNotFound)
		}
		return runtime.State{}, fmt.Errorf("state of container %s: %w", id, err)
	}
	var rs runtimeState
	if err := json.Unmarshal(out, &rs); err != nil {
		return runtime.State{}, fmt.Errorf("state of container %s: parse runtime state: %w", id, err)
	}
	st := rs.state()
	st.MonitorPid = monitorPID(st.Bundle, id)
	return st, nil
}

// listAttempts bounds List's tries when containers vanish under it.
const listAttempts = 3

// List returns the state of every container the runtime knows under
// RuntimeRoot, for reconciling records with the host after a restart.
func (r *Runtime) List(ctx context.Context) ([]runtime.State, error) {
	// runc's list reads the root directory, then each container's state
	// in it: a container deleted in between fails the whole list ("stat
	// <root>/<id>: no such file or directory"), so such a failure is
	// tried again.
	var out []byte
	var err error
	for attempt := 1; ; attempt++ {
		out, err = r.runtimeCmd(ctx, "list", "--format", "json")
		if err == nil || attempt == listAttempts || !strings.Contains(err.Error(), "no such file or directory") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var list []runtimeState // runc prints null for none
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("list containers: parse runtime output: %w", err)
	}
	states := make([]runtime.State, 0, len(list))
	for _, rs := range list {
		st := rs.state()
		st.MonitorPid = monitorPID(st.Bundle, st.ID)
		states = append(states, st)
	}
	return states, nil
}

func (rs runtimeState) state() runtime.State {
	st := runtime.State{ID: rs.ID, Status: runtime.StatusUnknown, Pid: rs.Pid, Bundle: rs.Bundle, Created: rs.Created}
	switch s := runtime.Status(rs.Status); s {
	case runtime.StatusCreated, runtime.StatusRunning, runtime.StatusStopped, runtime.StatusPaused:
		st.Status = s
	}
	return st
}

// Start starts the user process of a created container.
func (r *Runtime) Start(ctx context.Context, id string) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	if _, err := r.runtimeCmd(ctx, "start", id); err != nil {
		if r.isNotExist(err, id) {
			return fmt.Errorf("start container %s: %w", id, errdefs.ErrNotFound)
		}
		return fmt.Errorf("start container %s: %w", id, err)
	}
	return nil
}

// Kill sends sig to the container's init process, or to all its processes
// if all is set. A container that has already stopped is not an error; an
// unknown ID gives an error wrapping errdefs.ErrNotFound.
func (r *Runtime) Kill(ctx context.Context, id string, sig syscall.Signal, all bool) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	args := []string{id, strconv.Itoa(int(sig))}
	if all {
		args = append([]string{"--all"}, args...)
	}
	_, err := r.runtimeCmd(ctx, "kill", args...)
	if err == nil {
		return nil
	}
	if r.isNotExist(err, id) {
		return fmt.Errorf("kill container %s: %w", id, errdefs.ErrNotFound)
	}
	// runc says "container not running"; ask rather than match the text.
	if st, stErr := r.State(ctx, id); stErr == nil && st.Status == runtime.StatusStopped {
		return nil
	} else if errdefs.IsNotFound(stErr) {
		return fmt.Errorf("kill container %s: %w", id, errdefs.ErrNotFound)
	}
	return fmt.Errorf("kill container %s with signal %d: %w", id, sig, err)
}

// Delete removes the container: the runtime's state (`delete --force`,
// which kills a container that still runs), then, once its conmon has
// exited, the exit file, the attach symlink and conmon's files in the
// bundle. The bundle directory itself and the log file stay. Deleting an
// unknown ID removes any files left for it and returns nil.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := runtime.ValidateID(id); err != nil {
		return err
	}
	// conmon's attach symlink leads to the bundle; the runtime's state is
	// asked only without it (one runtime call less on every delete).
	bundle := r.bundleOf(id)
	if bundle == "" {
		st, err := r.State(ctx, id)
		switch {
		case err == nil:
			bundle = st.Bundle
		case errdefs.IsNotFound(err):
		default:
			return fmt.Errorf("delete container %s: %w", id, err)
		}
	}
	if _, err := r.runtimeCmd(ctx, "delete", "--force", id); err != nil && !r.isNotExist(err, id) {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	// conmon writes the exit file right after the container's init dies;
	// wait for it to finish so that it does not recreate what is removed
	// below.
	if err := awaitMonitor(ctx, bundle, id); err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	if err := r.removeFiles(id, bundle); err != nil {
		return fmt.Errorf("delete container %s: %w", id, err)
	}
	log.G(ctx).Debug("container deleted", "id", id)
	return nil
}

// Pids returns the host pids of the processes in container id (`runtime
// ps`), for stats. A stopped container has none; an unknown ID gives an
// error wrapping errdefs.ErrNotFound.
func (r *Runtime) Pids(ctx context.Context, id string) ([]int, error) {
	if err := runtime.ValidateID(id); err != nil {
		return nil, err
	}
	out, err := r.runtimeCmd(ctx, "ps", "--format", "json", id)
	if err != nil {
		if r.isNotExist(err, id) {
			return nil, fmt.Errorf("processes of container %s: %w", id, errdefs.ErrNotFound)
		}
		if st, stErr := r.State(ctx, id); stErr == nil && st.Status == runtime.StatusStopped {
			return nil, nil
		} else if errdefs.IsNotFound(stErr) {
			return nil, fmt.Errorf("processes of container %s: %w", id, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("processes of container %s: %w", id, err)
	}
	var pids []int // runc prints null for none
	if err := json.Unmarshal(out, &pids); err != nil {
		return nil, fmt.Errorf("processes of container %s: parse runtime output: %w", id, err)
	}
	return pids, nil
}
