package device

import (
	"context"
	"time"
)

// Backend is the device plugin's only view of the GPUs: NVML on a real node (pkg/nvml over the
// driver's libnvidia-ml), or the same pkg/nvml code over a fake go-nvml library (pkg/fake). It is
// the one seam between real and fake mode.
type Backend interface {
	// Name is "nvml" or "fake", for logs and metrics.
	Name() string
	// Discover lists the node's GPUs in NVML index order, all marked Healthy.
	Discover() ([]GPU, error)
	// WatchXIDs sends every critical XID event of the given GPUs to out until ctx ends; it
	// returns ctx.Err() then, or an error when events cannot be watched at all.
	WatchXIDs(ctx context.Context, uuids []string, out chan<- XIDEvent) error
	// Probe checks that the GPU answers basic queries (the recovery signal: NVML has no
	// "recovered" event). nil means it answered.
	Probe(uuid string) error
	// Processes returns the compute processes on the GPU with their memory use.
	Processes(uuid string) ([]ProcessMemory, error)
}

// XIDEvent is one NVML critical error (XID) on one GPU. XID meanings: NVIDIA's "XID Errors"
// documentation.
type XIDEvent struct {
	UUID string
	XID  uint64
	Time time.Time
}

// ProcessMemory is one process's memory use on a GPU.
type ProcessMemory struct {
	PID uint32
	// UsedMiB is the process's GPU memory in MiB.
	UsedMiB int64
}
