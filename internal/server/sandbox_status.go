package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/sandbox"
)

// sandboxInfo is the verbose PodSandboxStatus info (key "info"), which
// `crictl inspectp` and `podbay inspect` print. Its networkSettings carry the
// fixed schema of docs/design.md ("Network settings"), SandboxKey included.
type sandboxInfo struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Pid  int    `json:"pid"`
	// SandboxKind is pause, shim or pinned (no sandbox process: Pid is
	// 0 and Pins name its namespaces).
	SandboxKind string       `json:"sandboxKind"`
	Pins        sandbox.Pins `json:"pins,omitzero"`
	// ShmPath is the pod's shared /dev/shm on the host, if it has one.
	ShmPath         string          `json:"shmPath,omitempty"`
	State           sandbox.State   `json:"state"`
	Phase           sandbox.Phase   `json:"phase"`
	RuntimeHandler  string          `json:"runtimeHandler"`
	NetworkMode     string          `json:"networkMode"`
	NetworkOrder    string          `json:"networkOrder"`
	NetworkStopped  bool            `json:"networkStopped"`
	NetworkSettings any             `json:"networkSettings"`
	Bundle          string          `json:"bundle"`
	Config          json.RawMessage `json:"config,omitempty"`
	RuntimeSpec     json.RawMessage `json:"runtimeSpec,omitempty"`
}

// PodSandboxStatus reports a sandbox's state and IPs; with verbose, its
// record and OCI spec.
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := s.index.Get(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	rec := sb.Record()
	resp := &runtimeapi.PodSandboxStatusResponse{Status: sandboxStatus(rec)}
	if req.GetVerbose() {
		info := sandboxInfo{
			ID: rec.ID, Name: rec.Name, Pid: rec.Pid, State: rec.Phase.State(), Phase: rec.Phase,
			SandboxKind: string(s.sandboxKind(rec)), Pins: rec.Pins, ShmPath: rec.ShmPath,
			RuntimeHandler: rec.RuntimeHandler, NetworkMode: rec.NetworkMode,
			NetworkOrder: rec.NetworkOrder, NetworkStopped: rec.Network == sandbox.NetworkReleased,
			NetworkSettings: rec.NetworkSettings, Bundle: rec.BundleDir(),
			Config: rec.Config,
		}
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

func sandboxStatus(rec sandbox.Record) *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id: rec.ID,
		Metadata: &runtimeapi.PodSandboxMetadata{
			Name: rec.Metadata.Name, Namespace: rec.Metadata.Namespace,
			Uid: rec.Metadata.UID, Attempt: rec.Metadata.Attempt,
		},
		State:          criState(rec.Phase),
		CreatedAt:      rec.CreatedAt.UnixNano(),
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Labels:         rec.Labels,
		Annotations:    rec.Annotations,
		RuntimeHandler: rec.RuntimeHandler,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{Options: &runtimeapi.NamespaceOption{
			Network: criNamespaceMode(rec.Namespaces.Network),
			Pid:     criNamespaceMode(rec.Namespaces.PID),
			Ipc:     criNamespaceMode(rec.Namespaces.IPC),
		}}},
	}
	// After Stop began releasing them, the IPs are no longer the pod's.
	if rec.ReportsIPs() {
		ips := rec.NetworkSettings.PodIPs()
		if len(ips) > 0 {
			st.Network.Ip = ips[0]
			for _, ip := range ips[1:] {
				st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
			}
		}
	}
	return st
}

func criState(p sandbox.Phase) runtimeapi.PodSandboxState {
	if p == sandbox.PhaseReady {
		return runtimeapi.PodSandboxState_SANDBOX_READY
	}
	return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

func criNamespaceMode(m sandbox.NamespaceMode) runtimeapi.NamespaceMode {
	return runtimeapi.NamespaceMode(runtimeapi.NamespaceMode_value[string(m)])
}
