package procfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// NetDev is one network interface's counters from /proc/<pid>/net/dev.
type NetDev struct {
	Name                                    string
	RxBytes, RxPackets, RxErrors, RxDropped uint64
	TxBytes, TxPackets, TxErrors, TxDropped uint64
}

// ReadNetDev reads the interfaces of the network namespace process pid is
// in, loopback left out (as cAdvisor does).
func ReadNetDev(pid int) ([]NetDev, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/dev")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseNetDev(f)
}

// ParseNetDev parses /proc/net/dev, loopback left out: two header lines,
// then per interface "name: rx bytes packets errs drop fifo frame
// compressed multicast, tx bytes packets errs drop fifo colls carrier
// compressed". A line with fewer than those 16 numbers is skipped; a
// counter that is not a number is an error.
func ParseNetDev(r io.Reader) ([]NetDev, error) {
	var out []NetDev
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		fields := strings.Fields(rest)
		if name == "lo" || len(fields) < 16 {
			continue
		}
		var v [16]uint64
		for i := range v {
			n, err := strconv.ParseUint(fields[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse net/dev line of %s: %w", name, err)
			}
			v[i] = n
		}
		out = append(out, NetDev{
			Name:    name,
			RxBytes: v[0], RxPackets: v[1], RxErrors: v[2], RxDropped: v[3],
			TxBytes: v[8], TxPackets: v[9], TxErrors: v[10], TxDropped: v[11],
		})
	}
	return out, sc.Err()
}
