package runtime

import (
	"slices"
	"sync"
	"testing"
	"time"
)

func TestAwaitDone(t *testing.T) {
	closed := func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }
	t.Run("all done", func(t *testing.T) {
		var stopped []int
		AwaitDone(time.Hour, 0, []<-chan struct{}{closed(), closed()}, func(i int) { stopped = append(stopped, i) })
		if len(stopped) != 0 {
			t.Errorf("stopped %v, want none", stopped)
		}
	})
	t.Run("stop the rest", func(t *testing.T) {
		open1, open2 := make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		var stopped []int
		chans := []chan struct{}{nil, open1, open2}
		AwaitDone(10*time.Millisecond, 0, []<-chan struct{}{closed(), open1, open2}, func(i int) {
			mu.Lock()
			defer mu.Unlock()
			stopped = append(stopped, i)
			close(chans[i]) // a stopped copy ends
		})
		if !slices.Equal(stopped, []int{1, 2}) {
			t.Errorf("stopped %v, want [1 2]", stopped)
		}
	})
	t.Run("give up after", func(t *testing.T) {
		start := time.Now()
		AwaitDone(10*time.Millisecond, 20*time.Millisecond, []<-chan struct{}{make(chan struct{})}, func(int) {})
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("AwaitDone took %v with a stuck copy", d)
		}
	})
}
