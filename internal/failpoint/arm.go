//go:build failpoints

package failpoint

import "os"

// FromEnv parses the failpoints EnvVar names: this binary was built with
// the failpoints tag (the integration tests build podbayd so), which arms
// them.
func FromEnv() (*Set, error) {
	return Parse(os.Getenv(EnvVar))
}
