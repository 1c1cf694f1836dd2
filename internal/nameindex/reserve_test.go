package nameindex

import (
	"errors"
	"testing"
)

// TestTable: a result made after its requester gave up is parked for one
// retry; a retry that waited for the work takes it; a failure parks
// nothing and hands its error over.
func TestTable(t *testing.T) {
	var tb table
	p := tb.Reserve("slow")
	if tb.Pending("slow") != p {
		t.Fatal("the reservation is not pending")
	}
	tb.Abandon(p, false) // the client's deadline expires during the work
	tb.Finish("slow", p, "s1", nil)
	if tb.Pending("slow") != nil {
		t.Fatal("a finished reservation is still pending")
	}
	if !tb.TakeParked("s1") || tb.TakeParked("s1") {
		t.Fatal("the parked result was not handed out exactly once")
	}

	// Abandoned after the work finished, as the answer was on its way.
	q := tb.Reserve("late")
	tb.Finish("late", q, "l1", nil)
	tb.Abandon(q, true)
	if !tb.TakeParked("l1") {
		t.Fatal("a result abandoned after it was made is not parked")
	}
	r := tb.Reserve("gone")
	tb.Finish("gone", r, "g1", nil)
	tb.Abandon(r, false) // removed meanwhile
	if tb.TakeParked("g1") {
		t.Fatal("a result no longer published was parked")
	}

	// A retry that waited takes the result, which is then not parked.
	w := tb.Reserve("wait")
	tb.Abandon(w, false)
	tb.Finish("wait", w, "w1", nil)
	if id, err := tb.Take(w); err != nil || id != "w1" || tb.TakeParked("w1") {
		t.Fatalf("Take = %q, %v; want w1, and no longer parked", id, err)
	}

	boom := errors.New("boom")
	f := tb.Reserve("fail")
	tb.Abandon(f, false)
	tb.Finish("fail", f, "", boom)
	if _, err := tb.Take(f); !errors.Is(err, boom) {
		t.Fatalf("Take of a failed attempt: %v", err)
	}

	x := tb.Reserve("forgotten")
	tb.Abandon(x, false)
	tb.Finish("forgotten", x, "x1", nil)
	tb.Forget("x1")
	if tb.TakeParked("x1") {
		t.Fatal("a forgotten result stayed parked")
	}
}
