package container

import (
	"errors"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestIndexReserveAndLookup(t *testing.T) {
	x := NewIndex()
	mine, other, existing := x.Reserve("k8s_web")
	if mine == nil || other != nil || existing != "" {
		t.Fatalf("first reserve: %v %v %v", mine, other, existing)
	}
	if _, other, _ := x.Reserve("k8s_web"); other != mine {
		t.Fatalf("second reserve while the first is at work: %v, want the first's", other)
	}
	failed, _, _ := x.Reserve("k8s_failed")
	x.Finish("k8s_failed", failed, nil, errors.New("boom"))
	if again, _, _ := x.Reserve("k8s_failed"); again == nil {
		t.Fatal("a failed create kept its name")
	} else {
		x.Finish("k8s_failed", again, nil, errors.New("boom"))
	}
	c := New(Record{ID: "aaa111", Name: "k8s_web", SandboxID: "sb1"})
	x.Finish("k8s_web", mine, c, nil)
	if _, _, existing := x.Reserve("k8s_web"); existing != c.ID {
		t.Fatalf("reserve of a published name: %v, want the container", existing)
	}
	x.Add(New(Record{ID: "aab222", Name: "k8s_db", SandboxID: "sb2"}))
	for _, tc := range []struct {
		q    string
		want error
	}{
		{"aaa111", nil}, {"aaa", nil}, {"aa", errdefs.ErrInvalidArgument}, {"zzz", errdefs.ErrNotFound}, {"", errdefs.ErrInvalidArgument},
	} {
		_, err := x.Get(tc.q)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("Get(%q) = %v, want %v", tc.q, err, tc.want)
		}
	}
	if got := x.InSandbox("sb1"); len(got) != 1 || got[0].ID != "aaa111" {
		t.Fatalf("InSandbox = %v", got)
	}
	x.Delete(c)
	if x.Has("aaa111") {
		t.Fatal("deleted container still there")
	}
	if mine, _, _ := x.Reserve("k8s_web"); mine == nil {
		t.Fatal("name not freed by Delete")
	}
}

// TestIndexParking: a container finished after its requester gave up is
// parked for one retry; a retry that waited for the work takes it.
func TestIndexParking(t *testing.T) {
	x := NewIndex()
	p, _, _ := x.Reserve("k8s_slow")
	x.Abandon(p) // the client's deadline expires during the work
	c := New(Record{ID: "c1", Name: "k8s_slow"})
	x.Finish("k8s_slow", p, c, nil)
	_, _, existing := x.Reserve("k8s_slow")
	if existing != c.ID || !x.TakeParked(existing) {
		t.Fatal("the retry did not get the parked container")
	}
	if x.TakeParked(existing) {
		t.Fatal("a parked container was handed out twice")
	}

	// Abandoned after the work finished, as the answer was on its way.
	q, _, _ := x.Reserve("k8s_late")
	d := New(Record{ID: "d1", Name: "k8s_late"})
	x.Finish("k8s_late", q, d, nil)
	x.Abandon(q)
	if !x.TakeParked(d.ID) {
		t.Fatal("a container abandoned after it was made is not parked")
	}

	// A retry that waited for the work takes its result.
	r, _, _ := x.Reserve("k8s_wait")
	_, other, _ := x.Reserve("k8s_wait")
	x.Abandon(r)
	e := New(Record{ID: "e1", Name: "k8s_wait"})
	x.Finish("k8s_wait", r, e, nil)
	<-other.Done
	if id, err := x.Take(other); err != nil || id != "e1" || x.TakeParked(e.ID) {
		t.Fatalf("Take = %q, %v; parked afterwards: want taken", id, err)
	}
	f, _, _ := x.Reserve("k8s_fail")
	_, waiting, _ := x.Reserve("k8s_fail")
	x.Finish("k8s_fail", f, nil, errdefs.ErrNotFound)
	if _, err := x.Take(waiting); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Take of a failed attempt: %v", err)
	}
	g, _, _ := x.Reserve("k8s_gone")
	x.Abandon(g)
	gc := New(Record{ID: "g1", Name: "k8s_gone"})
	x.Finish("k8s_gone", g, gc, nil)
	x.Delete(gc)
	if x.TakeParked(gc.ID) {
		t.Fatal("a deleted container stayed parked")
	}
}
