package server

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// netDev is one interface's counters from /proc/<pid>/net/dev.
type netDev struct {
	name                                    string
	rxBytes, rxPackets, rxErrors, rxDropped uint64
	txBytes, txPackets, txErrors, txDropped uint64
}

// readNetDev reads the interfaces of the network namespace process pid is
// in, loopback left out (as cAdvisor does).
func readNetDev(pid int) ([]netDev, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/dev", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseNetDev(f)
}

// parseNetDev parses /proc/net/dev: two header lines, then per interface
// "name: rx bytes packets errs drop fifo frame compressed multicast, tx
// bytes packets errs drop fifo colls carrier compressed".
func parseNetDev(r io.Reader) ([]netDev, error) {
	var out []netDev
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
		out = append(out, netDev{
			name:    name,
			rxBytes: v[0], rxPackets: v[1], rxErrors: v[2], rxDropped: v[3],
			txBytes: v[8], txPackets: v[9], txErrors: v[10], txDropped: v[11],
		})
	}
	return out, sc.Err()
}
