package nvml

import (
	"sort"

	"github.com/hami-go/hami-go/pkg/device"
)

// Probe checks that the GPU answers a basic query: its handle by UUID, then
// nvmlDeviceGetMemoryInfo. A GPU that fell off the bus (XID 79) answers ERROR_GPU_IS_LOST
// here. nil means it answered; otherwise an *Error naming the call and the UUID.
func (b *backend) Probe(uuid string) error {
	h, err := b.handle(uuid)
	if err != nil {
		return err
	}
	_, err = call("nvmlDeviceGetMemoryInfo", uuid, h.GetMemoryInfo)
	return err
}

// Processes returns the GPU's compute processes (nvmlDeviceGetComputeRunningProcesses) sorted
// by PID, with memory in MiB rounded up from NVML's bytes. When NVML cannot tell a process's
// memory (NVML_VALUE_NOT_AVAILABLE, e.g. without permission to see other containers'
// processes) its UsedMiB is -1. Errors are *Error naming the call and the UUID.
func (b *backend) Processes(uuid string) ([]device.ProcessMemory, error) {
	h, err := b.handle(uuid)
	if err != nil {
		return nil, err
	}
	infos, err := call("nvmlDeviceGetComputeRunningProcesses", uuid, h.GetComputeRunningProcesses)
	if err != nil {
		return nil, err
	}
	out := make([]device.ProcessMemory, 0, len(infos))
	for _, p := range infos {
		used := int64(-1)
		if p.UsedGpuMemory != notAvailable {
			used = int64((p.UsedGpuMemory + mib - 1) / mib)
		}
		out = append(out, device.ProcessMemory{PID: p.Pid, UsedMiB: used})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long long (nvml.h: -1).
const notAvailable = ^uint64(0)
