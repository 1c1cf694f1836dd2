package image

import (
	"errors"
	"slices"
	"testing"

	"github.com/podbay/podbay/internal/errdefs"
)

func TestTwoTagsOneImage(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	img := simpleImage(t, "shared")
	reg.push("test/app:a", img)
	reg.push("test/app:b", img)
	refA, refB := reg.ref("test/app:a"), reg.ref("test/app:b")
	for _, ref := range []string{refA, refB} {
		if _, err := e.store.Pull(ctx, ref, nil); err != nil {
			t.Fatalf("Pull(%s): %v", ref, err)
		}
	}

	list, err := e.store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("List = %d images, want 1", len(list))
	}
	tags := slices.Clone(list[0].RepoTags)
	slices.Sort(tags)
	if !slices.Equal(tags, []string{refA, refB}) {
		t.Errorf("RepoTags = %v", list[0].RepoTags)
	}
	id := list[0].ID

	// Removing one of its tags removes the image with every tag
	// (cri-api v0.36+ RemoveImage).
	if err := e.store.Remove(ctx, refA); err != nil {
		t.Fatalf("Remove(%s): %v", refA, err)
	}
	for _, ref := range []string{refA, refB, id} {
		if _, err := e.store.Status(ctx, ref); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Status(%s) after removing %s: %v", ref, refA, err)
		}
	}
	if _, err := e.store.Pull(ctx, refB, nil); err != nil {
		t.Fatal(err)
	}

	// Removing by ID removes the image with every name.
	if _, err := e.store.Pull(ctx, refA, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Remove(ctx, id); err != nil {
		t.Fatalf("Remove(id): %v", err)
	}
	for _, ref := range []string{refA, refB, id} {
		if _, err := e.store.Status(ctx, ref); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Status(%s) after remove: %v", ref, err)
		}
	}
	if images, layers := e.counts(); images != 0 || layers != 0 {
		t.Errorf("after remove: %d images, %d layers", images, layers)
	}
	if err := e.store.Remove(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}

	// Removing the last tag removes the image.
	if _, err := e.store.Pull(ctx, refB, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Remove(ctx, refB); err != nil {
		t.Fatal(err)
	}
	if images, _ := e.counts(); images != 0 {
		t.Errorf("after removing the last tag: %d images", images)
	}
}

func TestRemoveByDigest(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	digest := reg.push("test/d:1", simpleImage(t, "digest"))
	ref := reg.ref("test/d@" + digest)
	if _, err := e.store.Pull(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Remove(ctx, ref); err != nil {
		t.Fatalf("Remove(%s): %v", ref, err)
	}
	if images, _ := e.counts(); images != 0 {
		t.Errorf("%d images left", images)
	}
	// Pulled by tag, removed by the digest it holds.
	if _, err := e.store.Pull(ctx, reg.ref("test/d:1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Remove(ctx, ref); err != nil {
		t.Fatalf("Remove(%s) of a tag-pulled image: %v", ref, err)
	}
	if images, _ := e.counts(); images != 0 {
		t.Errorf("%d images left", images)
	}
}

func TestListFilter(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t)
	e.insecure(reg.host)
	ctx := testCtx(t)
	one1, one2, two := simpleImage(t, "one1"), simpleImage(t, "one2"), simpleImage(t, "two")
	reg.push("test/one:1", one1)
	reg.push("test/one:2", one2)
	reg.push("test/two:1", two)
	for _, ref := range []string{"test/one:1", "test/one:2", "test/two:1"} {
		if _, err := e.store.Pull(ctx, reg.ref(ref), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{"", []string{configDigestHex(t, one1), configDigestHex(t, one2), configDigestHex(t, two)}},
		{reg.ref("test/one"), []string{configDigestHex(t, one1), configDigestHex(t, one2)}},
		{reg.ref("test/one:2"), []string{configDigestHex(t, one2)}},
		{configDigestHex(t, two)[:10], []string{configDigestHex(t, two)}},
		{reg.ref("test/three"), nil},
		{"busybox", nil},
	} {
		list, err := e.store.List(ctx, tc.filter)
		if err != nil {
			t.Errorf("List(%q): %v", tc.filter, err)
			continue
		}
		var ids []string
		for _, img := range list {
			ids = append(ids, img.ID)
		}
		slices.Sort(ids)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("List(%q) = %v, want %v", tc.filter, ids, want)
		}
	}
}

func TestPinned(t *testing.T) {
	reg := newRegistry(t)
	e := newEnv(t, func(c *Config) { c.PinnedImages = []string{reg.ref("pause:3.10")} })
	e.insecure(reg.host)
	ctx := testCtx(t)
	reg.push("pause:3.10", simpleImage(t, "pause"))
	reg.push("other:1", simpleImage(t, "other"))
	pause, err := e.store.Pull(ctx, reg.ref("pause:3.10"), nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.store.Pull(ctx, reg.ref("other:1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !pause.Pinned || other.Pinned {
		t.Errorf("Pinned: pause %v, other %v", pause.Pinned, other.Pinned)
	}
}
