// Package events fans events out to any number of subscribers without
// letting a slow one hold up the publisher.
//
// Each subscriber has its own bounded buffer. Publish never blocks: it puts
// the event in every subscriber's buffer, in the order Publish is called.
// A subscriber whose buffer is full is dropped at once — its channel is
// closed after the events it already holds and Err reports ErrOverflow — so
// what a subscriber receives is always a gap-free prefix of what was
// published while it was subscribed: it either gets every event, or learns
// that it missed some and must resynchronise (the kubelet relists).
package events

import (
	"errors"
	"sync"
)

var (
	// ErrOverflow ends a subscription whose buffer was full when an event
	// was published: it did not keep up.
	ErrOverflow = errors.New("subscriber did not keep up with the events; it was dropped")
	// ErrClosed ends the subscriptions of a closed broadcaster and refuses
	// new ones.
	ErrClosed = errors.New("event broadcaster closed")
)

// Options configure a Broadcaster; the zero value is usable.
type Options struct {
	// Buffer is how many events a subscriber may fall behind before it is
	// dropped; 0 means DefaultBuffer.
	Buffer int
	// OnDrop, when set, is called (without the broadcaster's lock) for each
	// subscriber dropped for not keeping up.
	OnDrop func()
	// OnSubscribers, when set, is called with the number of subscribers
	// after each change, under the broadcaster's lock: it must not call
	// back into the broadcaster.
	OnSubscribers func(n int)
}

// DefaultBuffer is the buffer of a subscriber when Options.Buffer is 0: the
// kubelet's evented PLEG reads into a channel of this capacity.
const DefaultBuffer = 1000

// Broadcaster delivers each published event to every current subscriber.
type Broadcaster[T any] struct {
	opts Options

	mu     sync.Mutex
	subs   map[*Subscription[T]]struct{} // guarded by mu
	closed bool                          // guarded by mu
}

// New returns a broadcaster with no subscribers.
func New[T any](opts Options) *Broadcaster[T] {
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	return &Broadcaster[T]{opts: opts, subs: map[*Subscription[T]]struct{}{}}
}

// Subscription is one subscriber's view of the events published after it
// subscribed.
type Subscription[T any] struct {
	b   *Broadcaster[T]
	c   chan T
	err error // set, under b.mu, before c is closed
}

// Subscribe adds a subscriber. It receives every event published from now
// on until it is cancelled, dropped, or the broadcaster is closed. A closed
// broadcaster returns ErrClosed.
func (b *Broadcaster[T]) Subscribe() (*Subscription[T], error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	s := &Subscription[T]{b: b, c: make(chan T, b.opts.Buffer)}
	b.subs[s] = struct{}{}
	b.countLocked()
	return s, nil
}

// Publish hands ev to every subscriber and returns without waiting for any:
// a subscriber whose buffer is full is dropped (ErrOverflow). Events are
// delivered in the order of the Publish calls, which callers serialise as
// their order requires. Publishing on a closed broadcaster does nothing.
func (b *Broadcaster[T]) Publish(ev T) {
	dropped := 0
	b.mu.Lock()
	for s := range b.subs {
		select {
		case s.c <- ev:
		default:
			b.endLocked(s, ErrOverflow)
			dropped++
		}
	}
	if dropped > 0 {
		b.countLocked()
	}
	b.mu.Unlock()
	if b.opts.OnDrop != nil {
		for range dropped {
			b.opts.OnDrop()
		}
	}
}

// Close ends every subscription with ErrClosed (each still receives the
// events it holds) and refuses new ones. It may be called more than once.
func (b *Broadcaster[T]) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.subs {
		b.endLocked(s, ErrClosed)
	}
	b.countLocked()
}

// Subscribers is the number of current subscribers.
func (b *Broadcaster[T]) Subscribers() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

func (b *Broadcaster[T]) endLocked(s *Subscription[T], err error) {
	delete(b.subs, s)
	s.err = err
	close(s.c)
}

func (b *Broadcaster[T]) countLocked() {
	if b.opts.OnSubscribers != nil {
		b.opts.OnSubscribers(len(b.subs))
	}
}

// Events is the subscriber's channel: the events in the order they were
// published. It is closed when the subscription ends, after the events it
// holds; then Err says why.
func (s *Subscription[T]) Events() <-chan T { return s.c }

// Err is why the subscription ended: ErrOverflow, ErrClosed, or nil when
// the subscriber cancelled it. Read it once Events is closed.
func (s *Subscription[T]) Err() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.err
}

// Cancel ends the subscription; the events it still holds need not be read.
// Cancelling an ended subscription does nothing.
func (s *Subscription[T]) Cancel() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if _, ok := s.b.subs[s]; !ok {
		return
	}
	s.b.endLocked(s, nil)
	s.b.countLocked()
}
