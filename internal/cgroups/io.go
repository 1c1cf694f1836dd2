package cgroups

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
)

// IOOp is a block I/O operation, named as cAdvisor (and cgroup v1's blkio
// files) name it.
type IOOp int

// The operations, in the order blkio prints them.
const (
	IORead IOOp = iota
	IOWrite
	IOSync
	IOAsync
	IODiscard
	IOTotal
	numIOOps
)

var ioOpNames = [numIOOps]string{"Read", "Write", "Sync", "Async", "Discard", "Total"}

func (o IOOp) String() string { return ioOpNames[o] }

// DeviceIO is the block I/O of a cgroup and its descendants on one device.
// Bytes and Ops count bytes and operations by IOOp; Has says which
// operations the kernel reports: every one on v1
// (blkio.throttle.io_service_bytes_recursive and io_serviced_recursive),
// Read, Write and Discard on v2 (io.stat's rbytes, wbytes, dbytes and
// rios, wios, dios).
type DeviceIO struct {
	Major, Minor uint64
	Bytes, Ops   [numIOOps]uint64
	Has          [numIOOps]bool
}

// Device is "major:minor".
func (d DeviceIO) Device() string {
	return strconv.FormatUint(d.Major, 10) + ":" + strconv.FormatUint(d.Minor, 10)
}

// ioDevices collects DeviceIO by device, in the order first seen.
type ioDevices struct {
	list []DeviceIO
	at   map[[2]uint64]int
}

func (d *ioDevices) get(major, minor uint64) *DeviceIO {
	key := [2]uint64{major, minor}
	if d.at == nil {
		d.at = map[[2]uint64]int{}
	}
	i, ok := d.at[key]
	if !ok {
		i = len(d.list)
		d.at[key] = i
		d.list = append(d.list, DeviceIO{Major: major, Minor: minor})
	}
	return &d.list[i]
}

// parseMajorMinor parses "8:0".
func parseMajorMinor(s string) (major, minor uint64, ok bool) {
	a, b, found := strings.Cut(s, ":")
	if !found {
		return 0, 0, false
	}
	major, err1 := strconv.ParseUint(a, 10, 64)
	minor, err2 := strconv.ParseUint(b, 10, 64)
	return major, minor, err1 == nil && err2 == nil
}

// parseBlkioV1 adds a v1 blkio file ("8:0 Read 4096" lines, and a last
// "Total N" line without a device, which is skipped) to devs: into Bytes
// when bytes is true, else into Ops. Malformed lines are skipped.
func parseBlkioV1(b []byte, bytesFile bool, devs *ioDevices) {
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		f := strings.Fields(string(line))
		if len(f) != 3 {
			continue
		}
		major, minor, ok := parseMajorMinor(f[0])
		if !ok {
			continue
		}
		op := -1
		for i, name := range ioOpNames {
			if name == f[1] {
				op = i
			}
		}
		v, vok := parseCounter(f[2])
		if op < 0 || !vok {
			continue
		}
		d := devs.get(major, minor)
		d.Has[op] = true
		if bytesFile {
			d.Bytes[op] = v
		} else {
			d.Ops[op] = v
		}
	}
}

// parseIOStatV2 parses io.stat: one line a device, "8:0 rbytes=1 wbytes=2
// rios=3 wios=4 dbytes=5 dios=6". Malformed lines and unknown keys are
// skipped.
func parseIOStatV2(b []byte) []DeviceIO {
	var devs ioDevices
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		f := strings.Fields(string(line))
		if len(f) < 2 {
			continue
		}
		major, minor, ok := parseMajorMinor(f[0])
		if !ok {
			continue
		}
		d := devs.get(major, minor)
		for _, kv := range f[1:] {
			k, val, _ := strings.Cut(kv, "=")
			v, vok := parseCounter(val)
			if !vok {
				continue
			}
			var op IOOp
			var ops bool
			switch k {
			case "rbytes":
				op = IORead
			case "wbytes":
				op = IOWrite
			case "dbytes":
				op = IODiscard
			case "rios":
				op, ops = IORead, true
			case "wios":
				op, ops = IOWrite, true
			case "dios":
				op, ops = IODiscard, true
			default:
				continue
			}
			d.Has[op] = true
			if ops {
				d.Ops[op] = v
			} else {
				d.Bytes[op] = v
			}
		}
	}
	return devs.list
}

// readIOV1 reads the blkio hierarchy's recursive throttle counters of a
// cgroup directory; a kernel without them gives nothing.
func readIOV1(dir string) ([]DeviceIO, error) {
	var devs ioDevices
	for _, f := range []struct {
		name  string
		bytes bool
	}{{"blkio.throttle.io_service_bytes_recursive", true}, {"blkio.throttle.io_serviced_recursive", false}} {
		b, err := readOptional(dir, f.name)
		if err != nil {
			return nil, err
		}
		parseBlkioV1(b, f.bytes, &devs)
	}
	return devs.list, nil
}

// readIOV2 reads io.stat, which exists where the parent enabled the io
// controller (and never in the root cgroup).
func readIOV2(dir string) ([]DeviceIO, error) {
	b, err := readOptional(dir, "io.stat")
	if err != nil || b == nil {
		return nil, err
	}
	return parseIOStatV2(b), nil
}

// AddIO returns the sum of a's and b's per-device counters, device by
// device (a pod's I/O summed from its containers' cgroups); a and b are
// left as they are.
func AddIO(a, b []DeviceIO) []DeviceIO {
	devs := ioDevices{list: slices.Clone(a)}
	for i := range a {
		if devs.at == nil {
			devs.at = map[[2]uint64]int{}
		}
		devs.at[[2]uint64{a[i].Major, a[i].Minor}] = i
	}
	for _, x := range b {
		d := devs.get(x.Major, x.Minor)
		for op := range numIOOps {
			if x.Has[op] {
				d.Has[op] = true
				d.Bytes[op] = addSat(d.Bytes[op], x.Bytes[op])
				d.Ops[op] = addSat(d.Ops[op], x.Ops[op])
			}
		}
	}
	return devs.list
}

func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}
