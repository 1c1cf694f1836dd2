package podstats

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/podbay/podbay/internal/cgroups"
)

// TestIOMetrics: a v1 device's counters become cAdvisor's
// container_blkio_device_usage_total (one per operation, labelled with
// the device's /dev name, major, minor) and container_fs_* read and write
// counters; a device sysfs does not name is labelled major:minor.
func TestIOMetrics(t *testing.T) {
	sys := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sys, "254:0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sys, "254:0", "uevent"), []byte("MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := &devNames{dir: sys}

	vda := cgroups.DeviceIO{Major: 254, Minor: 0}
	for op := range vda.Has {
		vda.Has[op] = true
	}
	vda.Bytes[cgroups.IORead], vda.Bytes[cgroups.IOWrite], vda.Bytes[cgroups.IOTotal] = 1048576, 1060864, 2109440
	vda.Ops[cgroups.IORead], vda.Ops[cgroups.IOWrite], vda.Ops[cgroups.IOTotal] = 4, 20, 24
	unnamed := cgroups.DeviceIO{Major: 8, Minor: 16}
	unnamed.Has[cgroups.IOWrite] = true
	unnamed.Bytes[cgroups.IOWrite], unnamed.Ops[cgroups.IOWrite] = 4096, 1

	m := newMetricSet(time.Now(), "p", "n", "c", "id", "img")
	m.addIO([]cgroups.DeviceIO{vda, unnamed}, names.name)
	got := checkMetrics(t, m.out)
	want := map[string]uint64{
		"container_blkio_device_usage_total{/dev/vda,254,0,Read}":    1048576,
		"container_blkio_device_usage_total{/dev/vda,254,0,Write}":   1060864,
		"container_blkio_device_usage_total{/dev/vda,254,0,Sync}":    0,
		"container_blkio_device_usage_total{/dev/vda,254,0,Async}":   0,
		"container_blkio_device_usage_total{/dev/vda,254,0,Discard}": 0,
		"container_blkio_device_usage_total{/dev/vda,254,0,Total}":   2109440,
		"container_fs_reads_bytes_total{/dev/vda}":                   1048576,
		"container_fs_reads_total{/dev/vda}":                         4,
		"container_fs_writes_bytes_total{/dev/vda}":                  1060864,
		"container_fs_writes_total{/dev/vda}":                        20,
		"container_blkio_device_usage_total{8:16,8,16,Write}":        4096,
		"container_fs_writes_bytes_total{8:16}":                      4096,
		"container_fs_writes_total{8:16}":                            1,
	}
	if len(got) != len(want) {
		t.Errorf("got %d metrics, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %d (present %v), want %d", k, g, ok, v)
		}
	}
	// The name is remembered: sysfs is read once a device.
	if err := os.RemoveAll(filepath.Join(sys, "254:0")); err != nil {
		t.Fatal(err)
	}
	if n := names.name(vda); n != "/dev/vda" {
		t.Errorf("second lookup = %q", n)
	}
}

// TestDescriptorsIO: ListMetricDescriptors describes the I/O metrics with
// cAdvisor's labels (critest v1.37's "should support returning metrics
// descriptors" lists them).
func TestDescriptorsIO(t *testing.T) {
	want := map[string]int{
		"container_blkio_device_usage_total": 4, "container_fs_reads_bytes_total": 1, "container_fs_reads_total": 1,
		"container_fs_writes_bytes_total": 1, "container_fs_writes_total": 1,
	}
	for _, d := range Descriptors() {
		if n, ok := want[d.Name]; ok {
			if len(d.LabelKeys) != len(metricBaseLabels)+n || d.LabelKeys[len(metricBaseLabels)] != "device" {
				t.Errorf("%s labels %v", d.Name, d.LabelKeys)
			}
			delete(want, d.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("no descriptor for %v", want)
	}
}
