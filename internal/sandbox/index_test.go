package sandbox

import (
	"errors"
	"testing"
)

// The parking state machine: whichever order the requester gives up, the
// work finishes and a retry arrives in, exactly one retry gets the sandbox.
func TestIndexParking(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string // abandon, finish, take (a waiting retry), retry (after publish)
		want  []bool   // result of each take/retry: got the sandbox?
	}{
		{"abandon then finish, late retry", []string{"abandon", "finish", "retry", "retry"}, []bool{true, false}},
		{"finish then abandon, late retry", []string{"finish", "abandon", "retry", "retry"}, []bool{true, false}},
		{"abandon, waiting retry, then late retry", []string{"abandon", "finish", "take", "retry"}, []bool{true, false}},
		{"not abandoned: no parking", []string{"finish", "retry"}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewIndex()
			mine, _, _ := x.Reserve("n")
			sb := New(Record{ID: "id1", Name: "n"})
			var got []bool
			for _, step := range tc.steps {
				switch step {
				case "abandon":
					x.Abandon(mine)
				case "finish":
					x.Finish("n", mine, sb, nil)
				case "take":
					id, err := x.Take(mine)
					got = append(got, err == nil && id == "id1")
				case "retry":
					_, other, existing := x.Reserve("n")
					if other != nil || existing != sb.ID {
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
	x := NewIndex()
	mine, _, _ := x.Reserve("f")
	x.Abandon(mine)
	boom := errors.New("boom")
	x.Finish("f", mine, nil, boom)
	if _, err := x.Take(mine); !errors.Is(err, boom) {
		t.Fatalf("Take of a failed attempt: %v", err)
	}
	if again, _, _ := x.Reserve("f"); again == nil {
		t.Fatal("name not released after a failed attempt")
	}
}
