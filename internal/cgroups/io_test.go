package cgroups

import (
	"testing"
)

// blkioBytes and blkioServiced are a container's
// blkio.throttle.io_service_bytes_recursive and io_serviced_recursive on
// this host's kernel (6.18, cgroup v1) after 1 MiB read and written with
// O_DIRECT under a throttle limit.
const (
	blkioBytes = "254:0 Read 1048576\n254:0 Write 1060864\n254:0 Sync 2109440\n254:0 Async 0\n254:0 Discard 0\n254:0 Total 2109440\n" +
		"8:16 Read 0\n8:16 Write 4096\n8:16 Sync 0\n8:16 Async 4096\n8:16 Discard 0\n8:16 Total 4096\nTotal 2113536\n"
	blkioServiced = "254:0 Read 4\n254:0 Write 20\n254:0 Sync 24\n254:0 Async 0\n254:0 Discard 0\n254:0 Total 24\n" +
		"8:16 Read 0\n8:16 Write 1\n8:16 Sync 0\n8:16 Async 1\n8:16 Discard 0\n8:16 Total 1\nTotal 25\n"
)

func TestIOV1(t *testing.T) {
	root := v1Tree(t)
	writeTree(t, root, map[string]string{
		"blkio/cgroup.procs":                                                   "1\n",
		"blkio" + containerPath + "/cgroup.procs":                              "4242\n",
		"blkio" + containerPath + "/blkio.throttle.io_service_bytes_recursive": blkioBytes,
		"blkio" + containerPath + "/blkio.throttle.io_serviced_recursive":      blkioServiced,
		// The non-recursive files count the cgroup alone: not read.
		"blkio" + containerPath + "/blkio.throttle.io_service_bytes": "254:0 Read 1\nTotal 1\n",
	})
	s := mustStats(t, mustNew(t, root), containerPath)
	if len(s.IO) != 2 {
		t.Fatalf("IO = %+v, want devices 254:0 and 8:16", s.IO)
	}
	vda, sdb := s.IO[0], s.IO[1]
	if vda.Device() != "254:0" || vda.Bytes[IORead] != 1048576 || vda.Bytes[IOWrite] != 1060864 ||
		vda.Ops[IORead] != 4 || vda.Ops[IOWrite] != 20 || vda.Bytes[IOTotal] != 2109440 || vda.Ops[IOSync] != 24 {
		t.Errorf("254:0 = %+v", vda)
	}
	for op, has := range vda.Has {
		if !has {
			t.Errorf("254:0 lacks %v", IOOp(op))
		}
	}
	if sdb.Device() != "8:16" || sdb.Bytes[IOWrite] != 4096 || sdb.Ops[IOAsync] != 1 {
		t.Errorf("8:16 = %+v", sdb)
	}

	// No blkio hierarchy (or no such cgroup in it): no IO, no error.
	if s := mustStats(t, mustNew(t, v1Tree(t)), containerPath); s.IO != nil {
		t.Errorf("no blkio hierarchy: IO = %+v", s.IO)
	}
}

func TestIOV2(t *testing.T) {
	root := v2Tree(t)
	writeTree(t, root, map[string]string{
		containerPath[1:] + "/io.stat": "8:0 rbytes=90112 wbytes=4096 rios=3 wios=1 dbytes=0 dios=0\n" +
			"254:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=5 dios=6 cost.usage=7\n" +
			"garbage\n",
	})
	s := mustStats(t, mustNew(t, root), containerPath)
	if len(s.IO) != 2 {
		t.Fatalf("IO = %+v", s.IO)
	}
	d := s.IO[1]
	if d.Device() != "254:0" || d.Bytes[IORead] != 1 || d.Bytes[IOWrite] != 2 || d.Ops[IORead] != 3 || d.Ops[IOWrite] != 4 ||
		d.Bytes[IODiscard] != 5 || d.Ops[IODiscard] != 6 {
		t.Errorf("254:0 = %+v", d)
	}
	if !d.Has[IORead] || !d.Has[IOWrite] || !d.Has[IODiscard] || d.Has[IOTotal] || d.Has[IOSync] {
		t.Errorf("254:0 reports %v, want Read, Write, Discard", d.Has)
	}
	if s.IO[0].Bytes[IORead] != 90112 {
		t.Errorf("8:0 = %+v", s.IO[0])
	}

	// The io controller not enabled: no io.stat, no IO.
	if s := mustStats(t, mustNew(t, v2Tree(t)), containerPath); s.IO != nil {
		t.Errorf("no io.stat: IO = %+v", s.IO)
	}
}

func TestAddIO(t *testing.T) {
	a := parseIOStatV2([]byte("8:0 rbytes=1 wbytes=2 rios=3 wios=4\n"))
	b := parseIOStatV2([]byte("8:0 rbytes=10 wbytes=20 rios=30 wios=40\n8:16 rbytes=5\n"))
	sum := AddIO(a, b)
	if len(sum) != 2 || sum[0].Bytes[IORead] != 11 || sum[0].Ops[IOWrite] != 44 || sum[1].Bytes[IORead] != 5 || !sum[1].Has[IORead] {
		t.Errorf("AddIO = %+v", sum)
	}
	if got := AddIO(nil, nil); got != nil {
		t.Errorf("AddIO(nil, nil) = %+v", got)
	}
}
