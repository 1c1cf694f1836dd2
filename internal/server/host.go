package server

import (
	"os"
	"strings"

	"github.com/podbay/podbay/internal/apparmor"
	"github.com/podbay/podbay/internal/specgen"
)

// DetectHost reads, once, the host facts container specs depend on.
func DetectHost(cgroupV2 bool, minOOMScoreAdj *int) (specgen.Host, error) {
	caps, err := specgen.CurrentCapabilities()
	if err != nil {
		return specgen.Host{}, err
	}
	h := specgen.Host{CgroupV2: cgroupV2, Capabilities: caps, MinOOMScoreAdj: minOOMScoreAdj}
	if apparmor.HostSupports() {
		h.AppArmor = true
		h.AppArmorDefaultProfile = apparmor.DefaultProfile
	}
	if cgroupV2 {
		// memory.swap.max exists in every non-root cgroup of kernels with
		// swap accounting, which every distribution kernel has.
		h.SwapControl = true
		h.Hugetlb = strings.Contains(readString("/sys/fs/cgroup/cgroup.controllers"), "hugetlb")
	} else {
		h.SwapControl = fileExists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
		// On hybrid hosts hugetlb may live on the v2 mount, where runc's
		// v1 manager cannot reach it.
		h.Hugetlb = fileExists("/sys/fs/cgroup/hugetlb/cgroup.procs")
	}
	return h, nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func readString(p string) string { b, _ := os.ReadFile(p); return string(b) }
