package container

import (
	"errors"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestIndexReserveAndLookup(t *testing.T) {
	x := NewIndex()
	if err := x.Reserve("k8s_web", "aaa111"); err != nil {
		t.Fatal(err)
	}
	if err := x.Reserve("k8s_web", "bbb222"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second reserve: %v", err)
	}
	x.Release("k8s_web", "bbb222") // not the holder: no effect
	if err := x.Reserve("k8s_web", "ccc"); err == nil {
		t.Fatal("release by a non-holder freed the name")
	}
	c := New(Record{ID: "aaa111", Name: "k8s_web", SandboxID: "sb1"})
	x.Add(c)
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
	if err := x.Reserve("k8s_web", "ddd"); err != nil {
		t.Fatalf("name not freed by Delete: %v", err)
	}
}
