package ocifeatures

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// QuerySpecVersion runs `<path> --version` and returns the OCI
// runtime-spec version the runtime says it implements, its "spec:" line
// ("1.0.2-dev" for runc 1.1, "1.0.0" for crun 1.8).
//
// podbay writes it as the bundle's ociVersion: crun before 1.9 refuses
// every config.json whose ociVersion is not a 1.0 one ("unknown version
// specified"), and the runtime-spec module podbay builds its specs with
// is newer. The fields podbay sets beyond that version (rro mounts, idmap
// mount options) are ones a runtime either understands whatever the
// declared version or is never asked for (the handler's features say so).
func QuerySpecVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	return ParseSpecVersion(string(out))
}

// ParseSpecVersion finds the "spec: <version>" line of a runtime's
// --version output.
func ParseSpecVersion(out string) (string, error) {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "spec:"); ok {
			if v = strings.TrimSpace(v); v != "" && !strings.ContainsAny(v, " \t") {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("no \"spec:\" line in the runtime's --version output")
}
