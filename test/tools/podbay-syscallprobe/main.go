// Command podbay-syscallprobe makes system calls a container's seccomp
// filter should refuse and prints one line per call: its name, then "ok"
// or the errno's name. The integration tests put it into an image
// (busybox cannot call io_uring_setup). It is static (CGO_ENABLED=0) so
// that it runs in any root filesystem.
package main

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioUringParams is struct io_uring_params: 120 bytes, zero asks for the
// defaults.
type ioUringParams [120]byte

func main() {
	var p ioUringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&p)), 0)
	report("io_uring_setup", errno)
	if errno == 0 {
		unix.Close(int(fd))
	}
	_, _, errno = unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	report("keyctl", errno)
	os.Exit(0)
}

func report(call string, errno unix.Errno) {
	if errno == 0 {
		fmt.Printf("%s ok\n", call)
		return
	}
	fmt.Printf("%s %s\n", call, unix.ErrnoName(errno))
}
