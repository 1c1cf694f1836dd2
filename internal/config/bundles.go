package config

import "path/filepath"

// BundlesRoot is the directory, under the state dir, of the containers'
// and sandboxes' OCI bundles (config.json and conmon's persist files),
// one per ID: on a tmpfs, as containerd's and CRI-O's are, since nothing
// in them outlives a reboot.
func BundlesRoot(state string) string { return filepath.Join(state, "bundles") }

// BundleDir is the OCI bundle of container or sandbox id.
func BundleDir(state, id string) string { return filepath.Join(BundlesRoot(state), id) }
