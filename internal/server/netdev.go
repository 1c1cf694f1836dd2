package server

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// networkUsage reads the pod's interfaces from /proc/<pid>/net/dev, which
// shows the network namespace of that process.
func networkUsage(pid int) (*runtimeapi.NetworkUsage, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/dev", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	now := time.Now().UnixNano()
	out := &runtimeapi.NetworkUsage{Timestamp: now}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		fields := strings.Fields(rest)
		if name == "lo" || len(fields) < 12 {
			continue
		}
		n := func(i int) *runtimeapi.UInt64Value {
			v, _ := strconv.ParseUint(fields[i], 10, 64)
			return u64(v)
		}
		iface := &runtimeapi.NetworkInterfaceUsage{
			Name: name, RxBytes: n(0), RxErrors: n(2), TxBytes: n(8), TxErrors: n(10),
		}
		out.Interfaces = append(out.Interfaces, iface)
		if name == "eth0" {
			out.DefaultInterface = iface
		}
	}
	return out, sc.Err()
}
