package config

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// distFile is the commented default configuration make install and the
// Debian package put in /etc/podbay.
const distFile = "../../dist/podbay.toml"

// setting is a commented-out key or table header in distFile: "#key = ..." or
// "#[table]", with no space after the '#' (explanations have one).
var setting = regexp.MustCompile(`^#([a-z_]+ = .*|\[[a-z_.]+\])$`)

// vmOnly are the keys a handler of type oci refuses: distFile names them in
// an example, not as settings.
var vmOnly = map[string]bool{"runtime_path": true, "runtime_root": true, "config_path": true, "options_type": true}

// TestDistConfigIsDefault uncomments every setting in dist/podbay.toml and
// checks that the result is exactly the built-in defaults, and that the file
// names every key: a key added, renamed or given a new default without
// updating the file fails here.
func TestDistConfigIsDefault(t *testing.T) {
	data, err := os.ReadFile(distFile)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if m := setting.FindStringSubmatch(l); m != nil {
			lines = append(lines, m[1])
		}
	}
	uncommented := strings.Join(lines, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "podbay.toml")
	if err := os.WriteFile(path, []byte(uncommented), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, false)
	if err != nil {
		t.Fatalf("uncommented %s: %v", distFile, err)
	}
	want := Default()
	for _, c := range []*Config{got, want} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		// "key = []" in the file is the same default as a nil list.
		if len(c.Image.DriverOptions) == 0 {
			c.Image.DriverOptions = nil
		}
		for name, rt := range c.Runtimes {
			if len(rt.PodAnnotations) == 0 {
				rt.PodAnnotations = nil
			}
			if len(rt.ContainerAnnotations) == 0 {
				rt.ContainerAnnotations = nil
			}
			c.Runtimes[name] = rt
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("uncommented %s differs from Default():\n got %+v\nwant %+v", distFile, got, want)
	}

	var raw map[string]any
	md, err := toml.Decode(uncommented, &raw)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	for _, k := range md.Keys() {
		set[k.String()] = true
	}
	for _, key := range keys("", reflect.TypeOf(Config{})) {
		if set[key] {
			continue
		}
		name := key[strings.LastIndex(key, ".")+1:]
		if vmOnly[name] && strings.HasPrefix(key, "runtimes.runc.") &&
			regexp.MustCompile(`(?m)^#\s+`+name+` = `).Match(data) {
			continue
		}
		// A key whose default is derived (unset: chosen at start) is
		// shown as an example, under a second comment marker.
		if derived[key] && regexp.MustCompile(`(?m)^#\s+`+name+` = `).Match(data) {
			continue
		}
		t.Errorf("%s does not name %s", distFile, key)
	}
}

// derived are the keys whose default depends on other keys.
var derived = map[string]bool{"tracing.insecure": true}

// keys lists the TOML keys of struct type typ under prefix; runtime
// handlers' keys are listed for the runc handler.
func keys(prefix string, typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("toml")
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		switch {
		case f.Type.Kind() == reflect.Struct:
			out = append(out, keys(key+".", f.Type)...)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
			out = append(out, keys(key+".runc.", f.Type.Elem())...)
		default:
			out = append(out, key)
		}
	}
	return out
}
