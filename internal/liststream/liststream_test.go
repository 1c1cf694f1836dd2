package liststream

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSendChunks(t *testing.T) {
	old := ChunkBytes
	ChunkBytes = 1000
	defer func() { ChunkBytes = old }()

	var items []*runtimeapi.Container
	for i := range 50 {
		items = append(items, &runtimeapi.Container{Id: fmt.Sprintf("%064d", i)})
	}
	// One item larger than a chunk goes alone.
	items[20].Labels = map[string]string{"big": strings.Repeat("x", 3000)}

	var got [][]*runtimeapi.Container
	if err := Send(items, func(c []*runtimeapi.Container) error {
		got = append(got, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var flat []string
	for _, c := range got {
		if len(c) == 0 {
			t.Fatalf("an empty list was sent")
		}
		size := 0
		for _, it := range c {
			size += proto.Size(it)
			flat = append(flat, it.Id)
		}
		if size > ChunkBytes && len(c) > 1 {
			t.Errorf("a list of %d items is %d bytes, over %d", len(c), size, ChunkBytes)
		}
	}
	if len(got) < 5 {
		t.Errorf("50 items of ~70 bytes in %d lists, want several", len(got))
	}
	if len(flat) != len(items) {
		t.Fatalf("sent %d items, want %d", len(flat), len(items))
	}
	for i, id := range flat {
		if id != items[i].Id {
			t.Fatalf("item %d is %s, want %s (order or duplicates)", i, id, items[i].Id)
		}
	}

	// Nothing to send: no message.
	calls := 0
	if err := Send([]*runtimeapi.Container(nil), func([]*runtimeapi.Container) error { calls++; return nil }); err != nil || calls != 0 {
		t.Errorf("no items: %d sends, err %v; want none", calls, err)
	}
	// A failed send ends it.
	boom := errors.New("boom")
	calls = 0
	if err := Send(items, func([]*runtimeapi.Container) error { calls++; return boom }); !errors.Is(err, boom) || calls != 1 {
		t.Errorf("failed send: %d sends, err %v; want 1 and boom", calls, err)
	}
}
