package fake

import (
	"fmt"
	"strconv"
	"sync"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"

	"github.com/hami-go/hami-go/pkg/device"
)

// Fleet is one fake node's GPUs: a go-nvml mock server with deterministic UUIDs, its missing
// functions filled in, and simulated faults and usage. Safe for concurrent use.
type Fleet struct {
	node    string
	profile Profile
	server  *server.Server
	lib     *library
	uuids   []string

	mu   sync.Mutex
	gpus []*gpuState            // guarded by mu; index = NVML index
	sets map[*eventSet]struct{} // guarded by mu; live (not freed) event sets
}

// gpuState is the simulated run-time state of one GPU.
type gpuState struct {
	// broken is set by a non-application XID and cleared by Recover: memory, process,
	// attribute and utilization queries answer ERROR_GPU_IS_LOST meanwhile.
	broken bool
	// procs is the simulated memory use per PID, in MiB.
	procs map[uint32]int64
}

// New builds node's fleet from profile p. UUIDs are "GPU-" + a name-based (SHA-1, RFC 4122
// version 5) UUID of the node name and the GPU index: the same node and index always give the
// same UUID, other nodes differ. PCI bus ids are "00000000:<index+1 in hex>:00.0". Errors: an
// empty node name, a profile without GPUs, an unknown mock server.
func New(node string, p Profile) (*Fleet, error) {
	if node == "" {
		return nil, fmt.Errorf("fake fleet: node name is empty")
	}
	if len(p.GPUs) == 0 {
		return nil, fmt.Errorf("fake fleet for node %q: profile %q has no GPUs", node, p.Spec)
	}
	if len(p.GPUs) > MaxGPUs {
		return nil, fmt.Errorf("fake fleet for node %q: profile %q has %d GPUs, more than %d", node, p.Spec, len(p.GPUs), MaxGPUs)
	}
	s, err := newServer(p)
	if err != nil {
		return nil, fmt.Errorf("fake fleet for node %q: %w", node, err)
	}
	f := &Fleet{
		node:    node,
		profile: p,
		server:  s,
		uuids:   make([]string, len(p.GPUs)),
		gpus:    make([]*gpuState, len(p.GPUs)),
		sets:    make(map[*eventSet]struct{}),
	}
	f.profile.GPUs = append([]GPUSpec(nil), p.GPUs...)
	for i := range p.GPUs {
		f.uuids[i] = GPUUUID(node, i)
		f.gpus[i] = &gpuState{procs: make(map[uint32]int64)}
		d := s.Devices[i].(*server.Device)
		d.UUID = f.uuids[i]
		d.PciBusID = pciBusID(i)
		f.fillDevice(i, d)
	}
	s.EventSetCreateFunc = f.newEventSet
	f.lib = &library{Server: s, fleet: f}
	return f, nil
}

// GPUUUID is the UUID of fake GPU index on node: "GPU-" + the version-5 UUID of
// "https://hami-go.io/fake-gpu/<node>/<index>" in the URL namespace.
func GPUUUID(node string, index int) string {
	name := "https://hami-go.io/fake-gpu/" + node + "/" + strconv.Itoa(index)
	return "GPU-" + uuid.NewSHA1(uuid.NameSpaceURL, []byte(name)).String()
}

// pciBusID is fake GPU i's NVML PCI bus id.
func pciBusID(i int) string { return fmt.Sprintf("00000000:%02X:00.0", i+1) }

// newServer makes the go-nvml mock server for p: the named DGX server, or dgxa100's server
// type with one device per GPUSpec, each from the closest go-nvml GPU configuration with name
// and memory overridden.
func newServer(p Profile) (*server.Server, error) {
	var s *server.Server
	switch p.Server {
	case "dgxa100":
		s = dgxa100.New()
	case "dgxh100":
		s = dgxh100.New()
	case "dgxh200":
		s = dgxh200.New()
	case "dgxb200":
		s = dgxb200.New()
	case "":
		cfgs := make([]gpus.Config, len(p.GPUs))
		for i, g := range p.GPUs {
			cfgs[i] = baseConfig(g.Model)
			cfgs[i].Name = g.Model
			cfgs[i].MemoryMB = uint64(g.MemoryMiB)
		}
		s = dgxa100.NewWithGPUs(cfgs...)
	default:
		return nil, fmt.Errorf("profile.server %q is not one of %v", p.Server, ProfileNames())
	}
	if len(s.Devices) != len(p.GPUs) {
		return nil, fmt.Errorf("profile %q lists %d GPUs but mock server %q has %d", p.Spec, len(p.GPUs), p.Server, len(s.Devices))
	}
	return s, nil
}

// baseConfig is the go-nvml GPU configuration a custom model starts from (architecture, MIG
// profiles, PCI device id): the same family when go-nvml has one, else a PCIe A100 without MIG.
func baseConfig(model string) gpus.Config {
	for _, c := range []struct {
		token string
		cfg   gpus.Config
	}{
		{"H100", gpus.H100_SXM5_80GB},
		{"H200", gpus.H200_SXM5_141GB},
		{"B200", gpus.B200_SXM5_180GB},
		{"A100", gpus.A100_SXM4_80GB},
		{"A30", gpus.A30_PCIE_24GB},
	} {
		if device.ModelMatches(c.token, model) {
			return c.cfg
		}
	}
	cfg := gpus.A100_PCIE_40GB
	cfg.MIGProfiles = gpus.MIGProfileConfig{}
	return cfg
}

// Node is the node name the fleet was built for.
func (f *Fleet) Node() string { return f.node }

// Profile is the profile the fleet was built from.
func (f *Fleet) Profile() Profile {
	p := f.profile
	p.GPUs = append([]GPUSpec(nil), p.GPUs...)
	return p
}

// UUIDs returns the GPUs' UUIDs in NVML index order.
func (f *Fleet) UUIDs() []string { return append([]string(nil), f.uuids...) }

// Library is the fleet as a go-nvml library, for nvml.NewBackend. Its Init and Shutdown
// succeed and do nothing.
func (f *Fleet) Library() gonvml.Interface { return f.lib }

// index finds a GPU by UUID.
func (f *Fleet) index(uuid string) (int, error) {
	for i, u := range f.uuids {
		if u == uuid {
			return i, nil
		}
	}
	return -1, fmt.Errorf("fake fleet of node %q has no GPU with uuid %q", f.node, uuid)
}

// deviceIndex finds a device handle of this fleet, -1 when it is not one.
func (f *Fleet) deviceIndex(d gonvml.Device) int {
	sd, ok := d.(*server.Device)
	if !ok {
		return -1
	}
	for i, x := range f.server.Devices {
		if x == gonvml.Device(sd) {
			return i
		}
	}
	return -1
}
