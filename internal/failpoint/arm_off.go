//go:build !failpoints

package failpoint

// FromEnv returns the empty Set: a binary built without the failpoints tag
// never reads EnvVar, so no environment can make it fail or kill itself.
func FromEnv() (*Set, error) {
	return nil, nil
}
