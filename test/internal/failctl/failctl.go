// Package failctl implements the control files of podbay's failure-injecting
// test tools: a file whose presence makes a step fail.
//
// An empty file (or one that does not hold a number) fails every time until
// it is removed. A file holding a count N fails the next N times: each
// failure decrements it and the last one removes it. The read-modify-write is
// serialised with flock on a sibling lock file, which is enough for plugins
// and runtimes invoked concurrently by one daemon.
package failctl

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Consume reports whether the step controlled by path must fail now, and
// uses up one failure of a counted file.
func Consume(path string) (bool, error) {
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// The control directory does not exist: nothing to fail.
			return false, nil
		}
		return false, fmt.Errorf("open lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // released on close anyway

	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return true, nil // not a count: fail until removed
	}
	if n <= 1 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return true, fmt.Errorf("remove %s: %w", path, err)
		}
		return true, nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(n-1)+"\n"), 0o644); err != nil {
		return true, fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return true, fmt.Errorf("rename %s: %w", tmp, err)
	}
	return true, nil
}
