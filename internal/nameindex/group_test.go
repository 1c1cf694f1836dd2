package nameindex

import (
	"slices"
	"testing"
)

type member struct{ id, group string }

func ids(ms []*member) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.id)
	}
	return out
}

// A grouped index files each record under its group from publication
// (Finish or Add) to Delete, and List's kept order follows every change.
func TestGroupedIndex(t *testing.T) {
	x := Grouped("thing", func(m *member) string { return m.id }, func(m *member) string { return m.group })
	a1, a2, b1 := &member{"a1", "a"}, &member{"a2", "a"}, &member{"b1", "b"}
	x.Add("n-a2", a2)
	p, _, _ := x.Reserve("n-a1")
	if got := x.InGroup("a"); !slices.Equal(ids(got), []string{"a2"}) {
		t.Fatalf("a reserved name is in its group: %v", ids(got))
	}
	x.Finish("n-a1", p, a1, nil)
	x.Add("n-b1", b1)
	if got := ids(x.InGroup("a")); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("group a = %v", got)
	}
	if got := ids(x.List()); !slices.Equal(got, []string{"a1", "a2", "b1"}) {
		t.Fatalf("List = %v", got)
	}
	l := x.List()
	l[0] = b1 // the caller's copy: the index's order must not change
	x.Delete(a1)
	if got := ids(x.List()); !slices.Equal(got, []string{"a2", "b1"}) {
		t.Fatalf("List after Delete = %v", got)
	}
	if got := ids(x.InGroup("a")); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("group a after Delete = %v", got)
	}
	x.Delete(a2)
	if len(x.InGroup("a")) != 0 || len(x.groups) != 1 {
		t.Fatalf("empty group kept: %v", x.groups)
	}
	x.Add("n-a1", a1)
	if got := ids(x.List()); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Fatalf("List after a new Add = %v", got)
	}
	if plain := newIndex(); plain.InGroup("") != nil && len(plain.InGroup("")) != 0 {
		t.Fatal("an index made by New has groups")
	}
}
