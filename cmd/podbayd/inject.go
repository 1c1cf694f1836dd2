package main

import (
	"context"
	"fmt"

	"github.com/podbay/podbay/internal/cdi"
	"github.com/podbay/podbay/internal/hooks"
	"github.com/podbay/podbay/internal/server"
)

// specInjectors opens what edits container specs besides the CRI request:
// the CDI registry of cdi_spec_dirs and the OCI hooks of hooks_dir. An
// empty list disables each (a nil interface, not a nil pointer in one).
func (d *daemon) specInjectors(ctx context.Context) (server.CDIDevices, server.OCIHooks, error) {
	var (
		devices  server.CDIDevices
		ociHooks server.OCIHooks
	)
	if len(d.cfg.CDISpecDirs) > 0 {
		r, err := cdi.New(ctx, d.cfg.CDISpecDirs)
		if err != nil {
			return nil, nil, fmt.Errorf("CDI: %w", err)
		}
		d.closers = append(d.closers, r.Close)
		devices = r
	}
	if len(d.cfg.HooksDir) > 0 {
		m, err := hooks.New(ctx, d.cfg.HooksDir)
		if err != nil {
			return nil, nil, fmt.Errorf("OCI hooks: %w", err)
		}
		d.closers = append(d.closers, m.Close)
		ociHooks = m
	}
	return devices, ociHooks, nil
}
