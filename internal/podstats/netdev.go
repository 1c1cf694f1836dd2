package podstats

import (
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/netns"
	"github.com/podbay/podbay/internal/podsandbox"
	"github.com/podbay/podbay/internal/procfs"
	"github.com/podbay/podbay/internal/sandbox"
)

// networkUsage reads the pod's interfaces (see podNetDev).
func networkUsage(rec sandbox.Record) (*runtimeapi.NetworkUsage, error) {
	devs, err := podNetDev(rec)
	if err != nil {
		return nil, err
	}
	return criNetworkUsage(devs, time.Now()), nil
}

// criNetworkUsage is devs in CRI form; eth0 is the default interface.
func criNetworkUsage(devs []procfs.NetDev, at time.Time) *runtimeapi.NetworkUsage {
	out := &runtimeapi.NetworkUsage{Timestamp: at.UnixNano()}
	for _, d := range devs {
		iface := &runtimeapi.NetworkInterfaceUsage{
			Name: d.Name, RxBytes: u64(d.RxBytes), RxErrors: u64(d.RxErrors), TxBytes: u64(d.TxBytes), TxErrors: u64(d.TxErrors),
		}
		out.Interfaces = append(out.Interfaces, iface)
		if d.Name == "eth0" {
			out.DefaultInterface = iface
		}
	}
	return out
}

// hasOwnNetwork reports whether rec's pod has a network namespace of its
// own whose counters podNetDev can read.
func hasOwnNetwork(rec sandbox.Record) bool {
	return rec.NetworkMode == sandbox.ModeCNI && (rec.Pid > 0 || podsandbox.Kind(rec.Kind) == podsandbox.KindPinned)
}

// podNetDev reads the interface counters of rec's network namespace: from
// the sandbox process's /proc/<pid>/net/dev, or for a pod without one
// (a pinned sandbox) from inside its pinned netns.
func podNetDev(rec sandbox.Record) ([]procfs.NetDev, error) {
	if rec.Pid > 0 {
		return procfs.ReadNetDev(rec.Pid)
	}
	return netns.ReadNetDev(rec.NetworkSettings.SandboxKey)
}
