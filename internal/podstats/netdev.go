package podstats

import (
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/podbay/podbay/internal/procfs"
)

// networkUsage reads the pod's interfaces from /proc/<pid>/net/dev, which
// shows the network namespace of that process.
func networkUsage(pid int) (*runtimeapi.NetworkUsage, error) {
	devs, err := procfs.ReadNetDev(pid)
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
