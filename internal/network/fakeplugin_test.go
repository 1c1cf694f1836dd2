package network

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// failingPlugin is a CNI plugin that fails every ADD with a fixed message.
const failingPlugin = `#!/bin/sh
cat >/dev/null
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.1","0.4.0","1.0.0"]}' ;;
ADD) echo '{"cniVersion":"1.0.0","code":999,"msg":"injected plugin failure","details":"from the test"}'; exit 1 ;;
esac
exit 0
`

// recorderPlugin is a CNI plugin that records each invocation's stdin and
// CNI_* environment in @LOG@ and answers ADD with a fixed IPv4 result (or
// fails it while @LOG@/fail-add exists).
const recorderPlugin = `#!/bin/sh
input=$(cat)
if [ "$CNI_COMMAND" = VERSION ]; then
	echo '{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]}'
	exit 0
fi
name="@LOG@/$(basename "$0").$CNI_COMMAND.$CNI_IFNAME.$CNI_CONTAINERID.$$"
printf '%s' "$input" > "$name.stdin"
env | grep '^CNI_' | sort > "$name.env"
if [ "$CNI_COMMAND" = ADD ]; then
	if [ -e "@LOG@/fail-add" ]; then
		echo '{"cniVersion":"1.0.0","code":999,"msg":"recorder told to fail"}'
		exit 1
	fi
	echo "{\"cniVersion\":\"1.0.0\",\"interfaces\":[{\"name\":\"$CNI_IFNAME\",\"mac\":\"0a:58:0a:01:02:03\",\"sandbox\":\"$CNI_NETNS\"}],\"ips\":[{\"address\":\"10.1.2.3/24\",\"gateway\":\"10.1.2.1\",\"interface\":0}]}"
fi
exit 0
`

func writeScript(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakePlugins installs recorder plugins under the given names in a new
// plugin dir and returns the dir and the log dir they record into.
func fakePlugins(t *testing.T, names ...string) (pluginDir, logDir string) {
	t.Helper()
	pluginDir, logDir = t.TempDir(), t.TempDir()
	script := strings.ReplaceAll(recorderPlugin, "@LOG@", logDir)
	for _, n := range names {
		writeScript(t, filepath.Join(pluginDir, n), script)
	}
	return pluginDir, logDir
}

// invocation is one recorded plugin call.
type invocation struct {
	plugin, command, ifName, containerID string
	stdin                                string
	env                                  map[string]string
}

// invocations returns the calls recorded in logDir.
func invocations(t *testing.T, logDir string) []invocation {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(logDir, "*.stdin"))
	if err != nil {
		t.Fatal(err)
	}
	var out []invocation
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".stdin")
		parts := strings.SplitN(base, ".", 5)
		if len(parts) != 5 {
			t.Fatalf("bad log name %s", base)
		}
		stdin, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		envData, err := os.ReadFile(strings.TrimSuffix(f, ".stdin") + ".env")
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(envData)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			env[k] = v
		}
		out = append(out, invocation{
			plugin: parts[0], command: parts[1], ifName: parts[2], containerID: parts[3],
			stdin: string(stdin), env: env,
		})
	}
	return out
}
