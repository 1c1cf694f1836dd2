package undo

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestOnError(t *testing.T) {
	for _, failed := range []bool{false, true} {
		ran := false
		func() (retErr error) {
			if failed {
				retErr = errors.New("create failed")
			}
			defer OnError(context.Background(), &retErr, "step", func(context.Context) error { ran = true; return nil })
			return retErr
		}()
		if ran != failed {
			t.Errorf("create failed %v: undo ran %v", failed, ran)
		}
	}
}

// A chain runs its steps in reverse order of registration and skips those
// after a failed one; each step's context outlives the caller's and is
// bounded by the chain's timeout.
func TestChain(t *testing.T) {
	var ran []string
	step := func(name string, err error) func(context.Context) error {
		return func(ctx context.Context) error {
			if ctx.Err() != nil {
				t.Errorf("%s: context already done: %v", name, ctx.Err())
			}
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > time.Minute {
				t.Errorf("%s: deadline %v, %v; want within the chain's timeout", name, dl, ok)
			}
			ran = append(ran, name)
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := Chain{Timeout: time.Minute}
	func() (retErr error) {
		defer c.OnError(ctx, &retErr, "first", step("first", nil))
		defer c.OnError(ctx, &retErr, "second", step("second", errors.New("busy")))
		defer c.OnError(ctx, &retErr, "third", step("third", nil))
		cancel() // the client gave up
		return errors.New("create failed")
	}()
	if want := []string{"third", "second"}; !reflect.DeepEqual(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
	if !c.Failed() {
		t.Error("Failed() = false after a failed step")
	}
}
