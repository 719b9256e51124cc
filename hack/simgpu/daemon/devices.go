// Package daemon is the "kernel side" of simgpu, hami-go's simulated NVIDIA driver: it owns the
// simulated GPUs (from a pkg/fake profile), accounts their memory per client process,
// records injected XID events (a non-application XID also breaks the GPU until RECOVER, as in
// pkg/fake) and serves them over a Unix socket with the line protocol documented in
// hack/simgpu/c/simgpu_client.h (the C client that libnvidia-ml and libcuda share).
package daemon

import (
	"fmt"

	"github.com/hami-go/hami-go/pkg/fake"
)

// Defaults reported by HELLO.
const (
	// DefaultDriverVersion is the simulated kernel driver version (R580 production branch).
	DefaultDriverVersion = "580.95.05"
	// DefaultCUDAVersion is the CUDA driver API version of that driver, as cuDriverGetVersion
	// reports it (1000*major + 10*minor): 13000 = CUDA 13.0.
	DefaultCUDAVersion = 13000
)

// Device is one simulated GPU as the daemon reports it (DEV).
type Device struct {
	// Index is the host (NVML, PCI bus) order index.
	Index int `json:"index"`
	// UUID is fake.GPUUUID(node, Index).
	UUID string `json:"uuid"`
	// Minor is the device node's minor number (/dev/nvidia<Minor>, char 195:<Minor>), see Minor.
	Minor int `json:"minor"`
	// TotalBytes is the memory size in bytes (the profile's MiB * 2^20).
	TotalBytes uint64 `json:"totalBytes"`
	// PCIBusID is fake.PCIBusID(Index), e.g. "00000000:01:00.0".
	PCIBusID string `json:"pciBusId"`
	// NUMA is fake.NUMANode(Index, count).
	NUMA int `json:"numa"`
	// SMs is the streaming multiprocessor count, fake.SMCount(Name).
	SMs int `json:"sms"`
	// PCIDeviceID is NVML's pciDeviceId (device id << 16 | vendor id 0x10DE).
	PCIDeviceID uint32 `json:"pciDeviceId"`
	// Name is the NVML device name (the profile's model), may contain spaces.
	Name string `json:"name"`
	// NVLinks is the number of NVLink links (TOPO), fake.Profile.NVLinks: on the named DGX
	// profiles every GPU with links reaches every other over NVLink; 0 = no NVLink.
	NVLinks int `json:"nvlinks"`
}

// Minor is the device node minor number of GPU i of n. Real drivers number minors in probe
// order, which need not be the PCI bus order NVML indexes by; to keep consumers honest the
// simulation uses the reverse order on multi-GPU nodes: minor = n-1-i (so on an 8-GPU node
// index 0 is /dev/nvidia7). A single GPU is minor 0.
func Minor(i, n int) int { return n - 1 - i }

// Devices builds node's simulated GPUs from a pkg/fake profile spec, in host order.
func Devices(node, profile string) ([]Device, error) {
	p, err := fake.ParseProfile(profile)
	if err != nil {
		return nil, err
	}
	if node == "" {
		return nil, fmt.Errorf("node name is empty: it seeds the GPU UUIDs (fake.GPUUUID)")
	}
	n := len(p.GPUs)
	out := make([]Device, n)
	for i, g := range p.GPUs {
		out[i] = Device{
			Index:       i,
			UUID:        fake.GPUUUID(node, i),
			Minor:       Minor(i, n),
			TotalBytes:  uint64(g.MemoryMiB) << 20,
			PCIBusID:    fake.PCIBusID(i),
			NUMA:        fake.NUMANode(i, n),
			SMs:         fake.SMCount(g.Model),
			PCIDeviceID: p.PCIDeviceID(i),
			Name:        g.Model,
			NVLinks:     p.NVLinks(i),
		}
	}
	return out, nil
}
