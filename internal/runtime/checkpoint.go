package runtime

import (
	"context"
	"time"
)

// CheckpointOptions are the options of Checkpointer.Checkpoint.
type CheckpointOptions struct {
	// ImagePath is the directory CRIU writes the container's images to;
	// it must exist and be empty.
	ImagePath string
	// WorkPath is where CRIU writes its log (dump.log) and statistics.
	WorkPath string
	// LeaveRunning keeps the container running after the dump (the CRI's
	// checkpoint, as CRI-O does); otherwise it is stopped.
	LeaveRunning bool
	// Timeout bounds the checkpoint; 0: the handler's default.
	Timeout time.Duration
}

// Checkpointer is a runtime that checkpoints a running container with CRIU
// (runc checkpoint).
type Checkpointer interface {
	Checkpoint(ctx context.Context, id string, opts CheckpointOptions) error
}

// Restorer is a runtime that creates a container from a checkpoint: as
// Create, but the runtime restores the checkpointed processes from the
// CRIU images in imagePath (runc restore), so the container is running
// when Restore returns the pid of its init process.
type Restorer interface {
	Restore(ctx context.Context, opts CreateOptions, imagePath string) (int, error)
}
