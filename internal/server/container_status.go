package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.podman.io/image/v5/docker/reference"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/container"
)

// ContainerStatus reports a container's state, exit code and reason,
// times, mounts, image, log path and current resources; with verbose, its
// OCI spec and pid.
func (s *Server) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	c, err := s.containers.Get(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	rec := c.Record()
	st := &runtimeapi.ContainerStatus{
		Id:          rec.ID,
		Metadata:    &runtimeapi.ContainerMetadata{Name: rec.MetaName, Attempt: rec.Attempt},
		State:       criContainerState(rec.State),
		CreatedAt:   rec.CreatedAt.UnixNano(),
		Image:       &runtimeapi.ImageSpec{Image: rec.ImageRef, ImageRef: imageID(rec.Image)},
		ImageRef:    imageID(rec.Image),
		ImageId:     imageID(rec.Image),
		ExitCode:    rec.ExitCode,
		Reason:      rec.Reason,
		Message:     rec.Message,
		Labels:      rec.Labels,
		Annotations: rec.Annotations,
		LogPath:     rec.LogPath,
		StopSignal:  criSignal(rec.StopSignal),
	}
	if u := rec.User; u != nil {
		lu := &runtimeapi.LinuxContainerUser{Uid: int64(u.UID), Gid: int64(u.GID)}
		for _, g := range u.Groups {
			lu.SupplementalGroups = append(lu.SupplementalGroups, int64(g))
		}
		st.User = &runtimeapi.ContainerUser{Linux: lu}
	}
	if !rec.StartedAt.IsZero() {
		st.StartedAt = rec.StartedAt.UnixNano()
	}
	if !rec.FinishedAt.IsZero() {
		st.FinishedAt = rec.FinishedAt.UnixNano()
	}
	if img, err := s.images.Status(ctx, rec.Image); err == nil && len(img.RepoTags) > 0 {
		// The kubelet shows the image by name; RepoDigests pin it.
		st.Image = &runtimeapi.ImageSpec{Image: statusImageName(rec, img.RepoTags), ImageRef: imageID(rec.Image)}
		if len(img.RepoDigests) > 0 {
			st.ImageRef = img.RepoDigests[0]
		}
	}
	for _, m := range rec.Mounts {
		st.Mounts = append(st.Mounts, &runtimeapi.Mount{
			ContainerPath: m.ContainerPath, HostPath: m.HostPath, Readonly: m.Readonly,
			SelinuxRelabel: m.SelinuxRelabel, RecursiveReadOnly: m.RecursiveReadOnly, MountOptions: m.Options,
			Propagation: runtimeapi.MountPropagation(runtimeapi.MountPropagation_value[m.Propagation]),
			Image:       criImageVolume(m), ImageSubPath: m.ImageSubPath,
		})
	}
	// The container's current limits, as the kubelet's in-place resize
	// compares them with what it asked for: from the bundle's spec, which
	// UpdateContainerResources keeps current.
	if spec := s.specs.Get(rec.BundleDir()); spec != nil {
		st.Resources = criResources(spec)
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if req.GetVerbose() {
		info := struct {
			ID          string          `json:"id"`
			SandboxID   string          `json:"sandboxID"`
			Pid         int             `json:"pid"`
			State       container.State `json:"state"`
			Bundle      string          `json:"bundle"`
			CgroupPath  string          `json:"cgroupPath"`
			Config      json.RawMessage `json:"config,omitempty"`
			RuntimeSpec json.RawMessage `json:"runtimeSpec,omitempty"`
		}{ID: rec.ID, SandboxID: rec.SandboxID, Pid: rec.Pid, State: rec.State,
			Bundle: rec.BundleDir(), CgroupPath: rec.CgroupPath, Config: rec.Config}
		if spec, err := os.ReadFile(filepath.Join(info.Bundle, "config.json")); err == nil && json.Valid(spec) {
			info.RuntimeSpec = spec
		}
		b, err := json.Marshal(info)
		if err != nil {
			return nil, err
		}
		resp.Info = map[string]string{"info": string(b)}
	}
	return resp, nil
}

// criResources reports a spec's cgroup limits as the CRI's
// ContainerResources (what containerd and CRI-O report): nil when the spec
// sets none.
func criResources(spec *specs.Spec) *runtimeapi.ContainerResources {
	if spec.Linux == nil || spec.Linux.Resources == nil {
		return nil
	}
	r := spec.Linux.Resources
	lr := &runtimeapi.LinuxContainerResources{Unified: r.Unified}
	if c := r.CPU; c != nil {
		if c.Period != nil {
			lr.CpuPeriod = int64(*c.Period)
		}
		if c.Quota != nil {
			lr.CpuQuota = *c.Quota
		}
		if c.Shares != nil {
			lr.CpuShares = int64(*c.Shares)
		}
		lr.CpusetCpus = c.Cpus
		lr.CpusetMems = c.Mems
	}
	if m := r.Memory; m != nil {
		if m.Limit != nil {
			lr.MemoryLimitInBytes = *m.Limit
		}
		if m.Swap != nil {
			lr.MemorySwapLimitInBytes = *m.Swap
		}
	}
	if spec.Process != nil && spec.Process.OOMScoreAdj != nil {
		lr.OomScoreAdj = int64(*spec.Process.OOMScoreAdj)
	}
	for _, h := range r.HugepageLimits {
		lr.HugepageLimits = append(lr.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: h.Pagesize, Limit: h.Limit})
	}
	return &runtimeapi.ContainerResources{Linux: lr}
}

// statusImageName is the name ContainerStatus reports for a container's
// image: the one in the pod's spec when it still tags the image, else its
// first tag. The kubelet compares it with the pod's spec (a container
// restarted with a new image must report that image, not another tag of
// the same content); containerd reports the first tag whatever was asked.
func statusImageName(rec container.Record, tags []string) string {
	if rec.UserImage != "" {
		if named, err := reference.ParseNormalizedNamed(rec.UserImage); err == nil {
			want := reference.TagNameOnly(named).String()
			if slices.Contains(tags, want) {
				return want
			}
		}
	}
	return tags[0]
}
