package runtime

import (
	"testing"
)

func TestCappedBuffer(t *testing.T) {
	b := NewCappedBuffer(5)
	for _, s := range []string{"abc", "de"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = (%d, %v)", n, err)
		}
	}
	if b.Truncated() {
		t.Error("Truncated with exactly max bytes written")
	}
	for _, s := range []string{"f", "ghi"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = (%d, %v)", n, err)
		}
	}
	if got := string(b.Bytes()); got != "abcde" {
		t.Errorf("Bytes = %q, want %q", got, "abcde")
	}
	if !b.Truncated() {
		t.Error("not Truncated after writing past max")
	}
	var empty CappedBuffer
	_, _ = empty.Write(nil)
	if empty.Truncated() {
		t.Error("empty write truncated")
	}
}
