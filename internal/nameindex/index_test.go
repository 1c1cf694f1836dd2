package nameindex

import (
	"errors"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

type rec struct{ id string }

func newIndex() *Index[*rec] { return New("thing", func(r *rec) string { return r.id }) }

func TestIndexReserveAndLookup(t *testing.T) {
	x := newIndex()
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
		t.Fatal("a failed attempt kept its name")
	} else {
		x.Finish("k8s_failed", again, nil, errors.New("boom"))
	}
	r := &rec{"aaa111"}
	x.Finish("k8s_web", mine, r, nil)
	if _, _, existing := x.Reserve("k8s_web"); existing != r.id {
		t.Fatalf("reserve of a published name: %v, want the record", existing)
	}
	x.Add("k8s_db", &rec{"aab222"})
	if _, _, existing := x.Reserve("k8s_db"); existing != "aab222" {
		t.Fatalf("reserve of a name published by Add: %v", existing)
	}
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
	if got := x.List(); len(got) != 2 || got[0].id != "aaa111" || got[1].id != "aab222" {
		t.Fatalf("List = %v", got)
	}
	x.Delete(r)
	if x.Has("aaa111") {
		t.Fatal("deleted record still there")
	}
	if mine, _, _ := x.Reserve("k8s_web"); mine == nil {
		t.Fatal("name not freed by Delete")
	}
	x.Delete(r) // not published: nothing happens
	if !x.Has("aab222") {
		t.Fatal("a second Delete touched another record")
	}
}

// The parking state machine: whichever order the requester gives up, the
// work finishes and a retry arrives in, exactly one retry gets the record.
func TestIndexParkingOrders(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string // abandon, finish, take (a waiting retry), retry (after publish)
		want  []bool   // result of each take/retry: got the record?
	}{
		{"abandon then finish, late retry", []string{"abandon", "finish", "retry", "retry"}, []bool{true, false}},
		{"finish then abandon, late retry", []string{"finish", "abandon", "retry", "retry"}, []bool{true, false}},
		{"abandon, waiting retry, then late retry", []string{"abandon", "finish", "take", "retry"}, []bool{true, false}},
		{"not abandoned: no parking", []string{"finish", "retry"}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newIndex()
			mine, _, _ := x.Reserve("n")
			r := &rec{"id1"}
			var got []bool
			for _, step := range tc.steps {
				switch step {
				case "abandon":
					x.Abandon(mine)
				case "finish":
					x.Finish("n", mine, r, nil)
				case "take":
					id, err := x.Take(mine)
					got = append(got, err == nil && id == "id1")
				case "retry":
					_, other, existing := x.Reserve("n")
					if other != nil || existing != r.id {
						t.Fatalf("retry after publish: other=%v existing=%v", other, existing)
					}
					got = append(got, x.TakeParked(existing))
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestIndexParking: a record finished after its requester gave up is
// parked for one retry; a retry that waited for the work takes it; a
// failure parks nothing and hands its error over; Delete unparks.
func TestIndexParking(t *testing.T) {
	x := newIndex()
	p, _, _ := x.Reserve("k8s_slow")
	x.Abandon(p) // the client's deadline expires during the work
	c := &rec{"c1"}
	x.Finish("k8s_slow", p, c, nil)
	_, _, existing := x.Reserve("k8s_slow")
	if existing != c.id || !x.TakeParked(existing) {
		t.Fatal("the retry did not get the parked record")
	}
	if x.TakeParked(existing) {
		t.Fatal("a parked record was handed out twice")
	}

	// Abandoned after the work finished, as the answer was on its way.
	q, _, _ := x.Reserve("k8s_late")
	d := &rec{"d1"}
	x.Finish("k8s_late", q, d, nil)
	x.Abandon(q)
	if !x.TakeParked(d.id) {
		t.Fatal("a record abandoned after it was made is not parked")
	}

	// A retry that waited for the work takes its result.
	r, _, _ := x.Reserve("k8s_wait")
	_, other, _ := x.Reserve("k8s_wait")
	x.Abandon(r)
	e := &rec{"e1"}
	x.Finish("k8s_wait", r, e, nil)
	<-other.Done
	if id, err := x.Take(other); err != nil || id != "e1" || x.TakeParked(e.id) {
		t.Fatalf("Take = %q, %v; parked afterwards: want taken", id, err)
	}
	f, _, _ := x.Reserve("k8s_fail")
	_, waiting, _ := x.Reserve("k8s_fail")
	x.Abandon(f)
	x.Finish("k8s_fail", f, nil, errdefs.ErrNotFound)
	if _, err := x.Take(waiting); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Take of a failed attempt: %v", err)
	}
	if again, _, _ := x.Reserve("k8s_fail"); again == nil {
		t.Fatal("name not released after a failed attempt")
	}
	g, _, _ := x.Reserve("k8s_gone")
	x.Abandon(g)
	gc := &rec{"g1"}
	x.Finish("k8s_gone", g, gc, nil)
	x.Delete(gc)
	if x.TakeParked(gc.id) {
		t.Fatal("a deleted record stayed parked")
	}
}
