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
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
