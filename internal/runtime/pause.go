package runtime

import "context"

// Pauser is a runtime that freezes and thaws every process of a container
// (runc pause and resume: the cgroup freezer), as a pod checkpoint does
// to capture all the pod's containers at one instant.
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
}
