package doctor

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// nsid asks the kernel (RTM_GETNSID) for the ID this network namespace
// gives the namespace pinned at path: the link_netnsid `ip link` shows for
// a veth whose peer is there. It only reads; -1 means none is assigned.
func nsid(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return -1, err
	}
	defer f.Close()
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return -1, err
	}
	defer unix.Close(s)
	// nlmsghdr (16) + rtgenmsg (1, padded to 4) + nlattr NETNSA_FD (4 + 4).
	const size = unix.SizeofNlMsghdr + 4 + 8
	msg := make([]byte, size)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], size)
	ne.PutUint16(msg[4:], unix.RTM_GETNSID)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], 1) // seq
	msg[16] = unix.AF_UNSPEC
	ne.PutUint16(msg[20:], 8)
	ne.PutUint16(msg[22:], unix.NETNSA_FD)
	ne.PutUint32(msg[24:], uint32(f.Fd()))
	if err := unix.Sendto(s, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return -1, err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(s, buf, 0)
	if err != nil {
		return -1, err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return -1, err
	}
	for _, m := range msgs {
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) >= 4 {
				if errno := int32(ne.Uint32(m.Data)); errno != 0 {
					return -1, fmt.Errorf("RTM_GETNSID: %w", unix.Errno(-errno))
				}
			}
		case unix.RTM_NEWNSID:
			// rtgenmsg (padded to 4), then the attributes.
			for b := m.Data[min(4, len(m.Data)):]; len(b) >= 4; {
				l, typ := int(ne.Uint16(b)), ne.Uint16(b[2:])
				if l < 4 || l > len(b) {
					break
				}
				if typ == unix.NETNSA_NSID && l >= 8 {
					return int(int32(ne.Uint32(b[4:]))), nil
				}
				b = b[min((l+3)&^3, len(b)):]
			}
		}
	}
	return -1, fmt.Errorf("RTM_GETNSID: no answer")
}
