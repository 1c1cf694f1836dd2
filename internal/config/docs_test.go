package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// guideFile is the operator guide; its "Configuration" section is the
// reference of every key.
const guideFile = "../../docs/operator-guide.md"

// TestConfigKeysDocumented checks that the configuration reference in
// docs/operator-guide.md names every key of Config, in backquotes as its
// table does (`key`, or `[table] key` for a key in a table): a key added
// or renamed without a line in the reference fails here.
func TestConfigKeysDocumented(t *testing.T) {
	data, err := os.ReadFile(guideFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, "\n## Configuration\n")
	if start < 0 {
		t.Fatalf("%s has no \"## Configuration\" section", guideFile)
	}
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	for _, key := range keys("", reflect.TypeOf(Config{})) {
		name := key[strings.LastIndex(key, ".")+1:]
		// `name` alone, or the last of a list: `[image] driver`, `driver_options`.
		if !strings.Contains(section, "`"+name+"`") && !strings.Contains(section, " "+name+"`") {
			t.Errorf("%s, \"Configuration\", does not name the key %s", guideFile, key)
		}
	}
}
