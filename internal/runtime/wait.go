package runtime

import (
	"os"
	"time"
)

// AwaitDone waits until each of done is closed, for up to grace in all:
// the copies of a process's output reaching the end of their input. When
// grace runs out first, it calls stop(i) for each i from the first one
// still open on (all at once: the grace is shared) and waits for those,
// for up to after more (after <= 0: without limit).
func AwaitDone(grace, after time.Duration, done []<-chan struct{}, stop func(i int)) {
	t := time.NewTimer(grace)
	defer t.Stop()
	for i, ch := range done {
		select {
		case <-ch:
			continue
		case <-t.C:
		}
		for j := i; j < len(done); j++ {
			stop(j)
		}
		var giveUp <-chan time.Time
		if after > 0 {
			stuck := time.NewTimer(after)
			defer stuck.Stop()
			giveUp = stuck.C
		}
		for _, ch := range done[i:] {
			select {
			case <-ch:
			case <-giveUp:
				return
			}
		}
		return
	}
}

// FdControl runs fn on f's descriptor without putting f into blocking
// mode, as f.Fd would.
func FdControl(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var fnErr error
	if err := rc.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		return err
	}
	return fnErr
}
