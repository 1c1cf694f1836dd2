package events

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// drain reads s until it ends and returns what it got.
func drain[T any](s *Subscription[T]) []T {
	var got []T
	for ev := range s.Events() {
		got = append(got, ev)
	}
	return got
}

func TestOrderAndManySubscribers(t *testing.T) {
	b := New[int](Options{Buffer: 10})
	const subs, n = 5, 1000
	var wg sync.WaitGroup
	results := make([][]int, subs)
	for i := range subs {
		s, err := b.Subscribe()
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = drain(s)
			if err := s.Err(); !errors.Is(err, ErrClosed) {
				t.Errorf("subscriber %d ended with %v, want ErrClosed", i, err)
			}
		}()
	}
	// Every subscriber keeps up (a buffer of 10 for 1000 events): the
	// publisher waits for them to empty their buffers now and then, as a
	// daemon's events come at the pace of the work that makes them.
	for i := range n {
		for b.maxQueued() >= 10 {
			time.Sleep(10 * time.Microsecond)
		}
		b.Publish(i)
	}
	b.Close()
	wg.Wait()
	for i, got := range results {
		if len(got) != n {
			t.Fatalf("subscriber %d got %d events, want %d", i, len(got), n)
		}
		for j, v := range got {
			if v != j {
				t.Fatalf("subscriber %d: event %d is %d", i, j, v)
			}
		}
	}
}

// maxQueued is the fullest subscriber buffer (for tests).
func (b *Broadcaster[T]) maxQueued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := 0
	for s := range b.subs {
		m = max(m, len(s.c))
	}
	return m
}

// Concurrent publishers: each one's events reach every subscriber in the
// order that publisher published them, and the subscribers agree on one
// order.
func TestConcurrentPublishersOrder(t *testing.T) {
	const publishers, per = 8, 200
	b := New[string](Options{Buffer: publishers * per})
	s1, _ := b.Subscribe()
	s2, _ := b.Subscribe()
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				b.Publish(fmt.Sprintf("%d/%d", p, i))
			}
		}()
	}
	wg.Wait()
	b.Close()
	got1, got2 := drain(s1), drain(s2)
	if len(got1) != publishers*per {
		t.Fatalf("got %d events, want %d", len(got1), publishers*per)
	}
	next := make([]int, publishers)
	for i, ev := range got1 {
		if got2[i] != ev {
			t.Fatalf("subscribers disagree at %d: %s vs %s", i, ev, got2[i])
		}
		var p, n int
		fmt.Sscanf(ev, "%d/%d", &p, &n)
		if n != next[p] {
			t.Fatalf("publisher %d: event %d came when %d was due", p, n, next[p])
		}
		next[p]++
	}
}

// A subscriber that never reads is dropped when its buffer overflows;
// Publish never waits for it, and the others get everything.
func TestSlowSubscriberDropped(t *testing.T) {
	var dropped atomic.Int32
	var count atomic.Int32
	b := New[int](Options{Buffer: 4, OnDrop: func() { dropped.Add(1) }, OnSubscribers: func(n int) { count.Store(int32(n)) }})
	slow, _ := b.Subscribe()
	fast, _ := b.Subscribe()
	if count.Load() != 2 {
		t.Fatalf("subscribers = %d, want 2", count.Load())
	}
	var got []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = drain(fast)
	}()

	published := make(chan struct{})
	go func() {
		defer close(published)
		for i := range 100 {
			for len(fast.c) == cap(fast.c) {
				time.Sleep(10 * time.Microsecond) // the fast one keeps up
			}
			b.Publish(i)
		}
	}()
	select {
	case <-published:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on a subscriber that does not read")
	}
	if dropped.Load() != 1 {
		t.Fatalf("dropped = %d, want 1", dropped.Load())
	}
	if b.Subscribers() != 1 || count.Load() != 1 {
		t.Fatalf("subscribers = %d (reported %d), want 1", b.Subscribers(), count.Load())
	}
	// The slow one gets a gap-free prefix, then learns it was dropped.
	prefix := drain(slow)
	if len(prefix) != 4 {
		t.Fatalf("slow subscriber got %v, want the 4 events its buffer held", prefix)
	}
	for i, v := range prefix {
		if v != i {
			t.Fatalf("slow subscriber's prefix %v is not 0..3", prefix)
		}
	}
	if err := slow.Err(); !errors.Is(err, ErrOverflow) {
		t.Fatalf("slow subscriber ended with %v, want ErrOverflow", err)
	}
	b.Close()
	<-done
	if len(got) != 100 {
		t.Fatalf("fast subscriber got %d events, want 100", len(got))
	}
}

func TestCancelAndClose(t *testing.T) {
	b := New[int](Options{})
	s, _ := b.Subscribe()
	b.Publish(1)
	s.Cancel()
	s.Cancel() // twice is fine
	if err := s.Err(); err != nil {
		t.Fatalf("cancelled subscription: Err = %v, want nil", err)
	}
	if got := drain(s); len(got) != 1 {
		t.Fatalf("cancelled subscription held %v", got)
	}
	b.Publish(2) // no subscriber: nothing happens
	if b.Subscribers() != 0 {
		t.Fatalf("subscribers = %d after cancel", b.Subscribers())
	}

	s2, _ := b.Subscribe()
	b.Close()
	b.Close()
	if _, ok := <-s2.Events(); ok {
		t.Fatal("closed broadcaster: subscription still open")
	}
	if !errors.Is(s2.Err(), ErrClosed) {
		t.Fatalf("Err = %v, want ErrClosed", s2.Err())
	}
	if _, err := b.Subscribe(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
	b.Publish(3) // after Close: nothing happens
	s2.Cancel()  // after the end: nothing happens
}

// Subscribing, cancelling, publishing and closing at once, for -race.
func TestConcurrentUse(t *testing.T) {
	b := New[int](Options{Buffer: 2})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 500 {
				b.Publish(i)
			}
		}()
		go func() {
			defer wg.Done()
			for range 50 {
				s, err := b.Subscribe()
				if err != nil {
					return
				}
				select {
				case <-s.Events():
				default:
				}
				s.Cancel()
			}
		}()
	}
	time.Sleep(time.Millisecond)
	b.Close()
	wg.Wait()
}
