package server

import (
	"errors"
	"os"

	"github.com/podbay/podbay/internal/config"
)

// bundleDir is where the OCI bundle of a new container or sandbox id goes:
// under the state dir, a tmpfs on a node, as containerd's and CRI-O's
// bundles are. The record names it (Bundle), so that a change of the state
// dir does not lose the bundles of running containers.
func (s *Server) bundleDir(id string) string { return config.BundleDir(s.cfg.State, id) }

// removeRecordDirs removes a container's or sandbox's directories: its dir
// under the root and its OCI bundle, under the state dir (or, for a record
// written before bundles moved there, inside dir). RemoveAll: either may
// already be gone — a bundle is, after a reboot empties the state dir.
func removeRecordDirs(dir, bundle string) error {
	return errors.Join(os.RemoveAll(bundle), os.RemoveAll(dir))
}

// bundleRoot holds the bundles bundleDir names.
func (s *Server) bundleRoot() string { return config.BundlesRoot(s.cfg.State) }
