package server

import (
	"fmt"

	"github.com/podbay/podbay/internal/container"
	"github.com/podbay/podbay/internal/errdefs"
	"github.com/podbay/podbay/internal/runtime"
)

// runningContainer returns container id (or unique prefix), which must be
// running.
func (s *Server) runningContainer(id string) (*container.Container, error) {
	c, err := s.containers.Get(id)
	if err != nil {
		return nil, err
	}
	if st := c.Record().State; st != container.StateRunning {
		return nil, fmt.Errorf("container %s is %s, not running: %w", c.ID, st, errdefs.ErrFailedPrecondition)
	}
	return c, nil
}

// runningContainerRuntime is runningContainer with the container's
// runtime.
func (s *Server) runningContainerRuntime(id string) (*container.Container, runtime.Runtime, error) {
	c, err := s.runningContainer(id)
	if err != nil {
		return nil, nil, err
	}
	rt, err := s.runtimeForContainer(c.Record())
	if err != nil {
		return nil, nil, err
	}
	return c, rt, nil
}
