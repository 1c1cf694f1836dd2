package podstats

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/podbay/podbay/internal/cgroups"
)

// sysDevBlock is where sysfs names block devices by "major:minor".
const sysDevBlock = "/sys/dev/block"

// devNames names block devices as cAdvisor labels their I/O ("/dev/vda"),
// from <dir>/<major>:<minor>/uevent's DEVNAME, and remembers the names
// (a node has few devices). A device sysfs does not name is labelled
// "major:minor": two such devices under one empty name would be one
// Prometheus series twice, which the kubelet's collector rejects.
type devNames struct {
	dir   string // sysDevBlock; a fake tree in tests
	mu    sync.Mutex
	names map[string]string // by "major:minor"; guarded by mu
}

// name returns the label of device d.
func (n *devNames) name(d cgroups.DeviceIO) string {
	key := d.Device()
	n.mu.Lock()
	name, ok := n.names[key]
	n.mu.Unlock()
	if ok {
		return name
	}
	name = key
	if b, err := os.ReadFile(filepath.Join(n.dir, key, "uevent")); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, found := bytes.CutPrefix(sc.Bytes(), []byte("DEVNAME=")); found && len(v) > 0 && !bytes.ContainsRune(v, '/') {
				name = "/dev/" + string(v)
			}
		}
	}
	n.mu.Lock()
	if n.names == nil {
		n.names = map[string]string{}
	}
	n.names[key] = name
	n.mu.Unlock()
	return name
}

// addIO adds the block I/O counters of each device, as cAdvisor does:
// container_blkio_device_usage_total (bytes) for every operation the
// kernel reports, and the read and write bytes and operations as
// container_fs_{reads,writes}{_bytes,}_total.
func (m *metricSet) addIO(io []cgroups.DeviceIO, name func(cgroups.DeviceIO) string) {
	for _, d := range io {
		dev := name(d)
		major, minor := strconv.FormatUint(d.Major, 10), strconv.FormatUint(d.Minor, 10)
		for op, has := range d.Has {
			if has {
				m.add(mBlkioDeviceUsage, d.Bytes[op], dev, major, minor, cgroups.IOOp(op).String())
			}
		}
		if d.Has[cgroups.IORead] {
			m.add(mFsReadsBytes, d.Bytes[cgroups.IORead], dev)
			m.add(mFsReads, d.Ops[cgroups.IORead], dev)
		}
		if d.Has[cgroups.IOWrite] {
			m.add(mFsWritesBytes, d.Bytes[cgroups.IOWrite], dev)
			m.add(mFsWrites, d.Ops[cgroups.IOWrite], dev)
		}
	}
}
