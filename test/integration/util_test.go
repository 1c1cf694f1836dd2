package integration

import (
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func randString(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	for i := range b {
		v, err := rand.Int(rand.Reader, big.NewInt(int64(len(letters))))
		if err != nil {
			panic(err)
		}
		b[i] = letters[v.Int64()]
	}
	return string(b)
}

func randHex(nbytes int) string {
	b := make([]byte, nbytes)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%x", b)
}

// pickSubnet chooses 10.199.N.0/24 with N random among those the host does
// not route yet.
func pickSubnet(t *testing.T) *net.IPNet {
	t.Helper()
	routes, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		t.Fatalf("ip route: %v", err)
	}
	for range 64 {
		n, _ := rand.Int(rand.Reader, big.NewInt(256))
		cidr := fmt.Sprintf("10.199.%d.0/24", n.Int64())
		if strings.Contains(string(routes), cidr) {
			continue
		}
		_, subnet, _ := net.ParseCIDR(cidr)
		return subnet
	}
	t.Fatal("no free 10.199.N.0/24 subnet")
	return nil
}

// freePort returns a TCP port nothing listens on right now.
// freePort returns a TCP port on 127.0.0.1 that is free now, for a
// listener the daemon opens later. It is taken below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range): a port from ":0" could
// be handed, in between, to a listener the daemon opens on ":0" (its
// streaming server) or to an outgoing connection.
func freePort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	lo, hi := 10000, low
	if hi-lo < 1000 {
		lo, hi = 1024, low
	}
	for range 200 {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(hi-lo)))
		if err != nil {
			t.Fatal(err)
		}
		port := lo + int(n.Int64())
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("no free port in [%d, %d)", lo, hi)
	return 0
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// tomlStrings writes ss as a TOML array of strings.
func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
