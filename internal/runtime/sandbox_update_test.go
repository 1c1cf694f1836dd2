package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUpdateSpecAnnotations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	doc := `{"ociVersion":"1.2.0","annotations":{"keep":"1","drop":"2"},"linux":{"resources":{"memory":{"limit":9007199254740993}}},"x-unknown":true}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := UpdateSpecAnnotations(path, map[string]string{"new": "3", "drop": ""}); err != nil {
		t.Fatal(err)
	}
	spec, err := ReadSpec(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Annotations) != 2 || spec.Annotations["keep"] != "1" || spec.Annotations["new"] != "3" {
		t.Errorf("annotations %v, want keep=1 new=3", spec.Annotations)
	}
	if got := *spec.Linux.Resources.Memory.Limit; got != 9007199254740993 {
		t.Errorf("memory limit %d: a 64-bit number lost digits", got)
	}
	b, _ := os.ReadFile(path)
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 || !strings.Contains(string(b), `"x-unknown": true`) {
		t.Errorf("mode %v or unknown field lost: %s", fi.Mode(), b)
	}
}
