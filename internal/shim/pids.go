package shim

import (
	"context"
	"fmt"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
)

// TaskPids returns the pids of the processes of container id as its shim
// reports them: host pids for containerd-shim-runc-v2, pids inside the VM
// for Kata. An unknown ID gives an error wrapping errdefs.ErrNotFound.
func (r *Runtime) TaskPids(ctx context.Context, id string) ([]int, error) {
	c, err := r.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	tasks, err := r.liveTasks(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("processes of container %s: %w", id, err)
	}
	cctx, cancel := r.commandContext(ctx)
	defer cancel()
	resp, err := tasks.Pids(cctx, &taskapi.PidsRequest{ID: id})
	if err != nil {
		return nil, fmt.Errorf("processes of container %s: %w", id, rpcError(err))
	}
	pids := make([]int, 0, len(resp.GetProcesses()))
	for _, p := range resp.GetProcesses() {
		pids = append(pids, int(p.GetPid()))
	}
	return pids, nil
}
