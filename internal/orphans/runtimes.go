package orphans

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/podbay/podbay/internal/annotations"
	"github.com/podbay/podbay/internal/log"
	"github.com/podbay/podbay/internal/objectid"
	"github.com/podbay/podbay/internal/runtime"
)

// listRuntimeContainers lists, per handler, the container IDs the runtimes
// hold. Like the other listings of Collect it must come before the records
// are read.
func listRuntimeContainers(ctx context.Context, h Host) map[string][]runtime.State {
	listed := map[string][]runtime.State{}
	for name, rt := range h.Runtimes {
		states, err := rt.ListContainers(ctx)
		if err != nil {
			log.G(ctx).Error("list runtime containers", "handler", name, "err", err)
			continue
		}
		for _, st := range states {
			// Only what podbay made: a runtime root an operator shares
			// with another engine also lists that engine's containers,
			// whose bundles are not in podbay's directories.
			if within(h.Root, st.Bundle) || (h.BundleRoot != "" && within(h.BundleRoot, st.Bundle)) {
				listed[name] = append(listed[name], st)
			}
		}
	}
	return listed
}

// collectRuntimes is start-up GC's one pass over the runtimes: it
// releases the runtime containers of IDs no record owns (those of a
// database moved aside as corrupt, or of a record quarantined as
// unreadable). It runs before the namespaces and root filesystems are
// collected: a namespace a process is in is kept, and a root filesystem
// must not be removed under a running container.
//
// The two sources of IDs may do different things, on purpose:
//   - a container a runtime listed (listed, per handler) is killed and
//     deleted with that handler;
//   - an ID only the host names (hinted: a netns, root filesystem, sandbox
//     or container dir, bundle) is deleted, never killed, with every handler, for
//     a runtime that cannot list its containers. Delete succeeds for an ID
//     a runtime does not know.
func collectRuntimes(ctx context.Context, runtimes map[string]runtime.Runtime, listed map[string][]runtime.State, owned map[string]bool, hinted ...[]string) {
	done := map[string]bool{}
	for name, states := range listed {
		rt := runtimes[name]
		for _, st := range states {
			id := st.ID
			if owned[id] || !objectid.Is(id) {
				continue
			}
			// Say whose it was: the kubelet will make the pod again, and
			// an operator reading the log wants to know which pods the
			// node lost.
			ctx := log.With(ctx, orphanFields(st.Bundle)...)
			if err := rt.Stop(ctx, id, 0, syscall.SIGKILL); err != nil {
				log.G(ctx).Error("kill orphaned container", "handler", name, "container", id, "err", err)
				continue
			}
			if err := rt.Delete(ctx, id); err != nil {
				log.G(ctx).Error("delete orphaned container", "handler", name, "container", id, "err", err)
				continue
			}
			done[id] = true
			log.G(ctx).Warn("removed a container no record owns", "handler", name, "container", id)
		}
	}
	for _, ids := range hinted {
		for _, id := range ids {
			if owned[id] || done[id] || !objectid.Is(id) {
				continue
			}
			done[id] = true
			for _, name := range slices.Sorted(maps.Keys(runtimes)) {
				if err := runtimes[name].Delete(ctx, id); err != nil {
					log.G(ctx).Error("delete orphaned runtime container", "id", id, "handler", name, "err", err)
				}
			}
		}
	}
}

// within reports whether path lies inside dir.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsAbs(path) && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}

// orphanFields are the log fields naming the pod and container a lost
// container's bundle says it belonged to, as far as its spec tells.
func orphanFields(bundle string) []any {
	spec, err := runtime.ReadSpec(bundle)
	if err != nil {
		return nil
	}
	var fields []any
	for _, f := range []struct{ field, key string }{
		{"pod_name", annotations.SandboxName},
		{"pod_namespace", annotations.SandboxNamespace},
		{"container_name", annotations.ContainerName},
	} {
		if v := spec.Annotations[f.key]; v != "" {
			fields = append(fields, f.field, v)
		}
	}
	return fields
}
