package fake

import (
	"sort"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// mib is one mebibyte in bytes.
const mib = 1 << 20

// numaNode is the simulated NUMA node of GPU i of n: the first half on node 0, the rest on 1.
func numaNode(i, n int) int {
	if i < (n+1)/2 {
		return 0
	}
	return 1
}

// fillDevice sets the mock functions go-nvml's server leaves nil (NUMA, attributes, NVLink,
// P2P, topology, events, processes, utilization) and replaces memory and PCI info with the
// fleet's simulated state.
func (f *Fleet) fillDevice(i int, d *server.Device) {
	spec := f.profile.GPUs[i]
	facts := factsFor(spec.Model)
	f.fillIdentity(i, d, spec, facts)
	f.fillMemory(i, d, spec)
	f.fillLinks(i, d, facts)
	f.fillEvents(i, d)
}

// fillIdentity sets GPU i's NUMA node, PCI info (its simulated bus ID) and attributes.
func (f *Fleet) fillIdentity(i int, d *server.Device, spec GPUSpec, facts modelFacts) {
	n := len(f.profile.GPUs)
	pciDeviceID := d.Config.PciDeviceId

	d.GetNumaNodeIdFunc = func() (int, gonvml.Return) { return numaNode(i, n), gonvml.SUCCESS }

	d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
		p := gonvml.PciInfo{Bus: uint32(i + 1), PciDeviceId: pciDeviceID}
		for k, c := range []byte(pciBusID(i)) {
			p.BusId[k] = int8(c)
		}
		for k, c := range []byte(pciBusID(i)[4:]) { // legacy form "0000:XX:00.0"
			p.BusIdLegacy[k] = int8(c)
		}
		return p, gonvml.SUCCESS
	}

	d.GetAttributesFunc = func() (gonvml.DeviceAttributes, gonvml.Return) {
		if f.isBroken(i) {
			return gonvml.DeviceAttributes{}, gonvml.ERROR_GPU_IS_LOST
		}
		return gonvml.DeviceAttributes{MultiprocessorCount: facts.sms, MemorySizeMB: uint64(spec.MemoryMiB)}, gonvml.SUCCESS
	}
}

// fillMemory sets GPU i's memory info, running processes and utilization from the fleet's
// simulated memory use; each reports the GPU lost once an injected XID broke it.
func (f *Fleet) fillMemory(i int, d *server.Device, spec GPUSpec) {
	totalBytes := uint64(spec.MemoryMiB) * mib

	d.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) {
		used, ok := f.usedBytes(i)
		if !ok {
			return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST
		}
		return gonvml.Memory{Total: totalBytes, Used: used, Free: totalBytes - used}, gonvml.SUCCESS
	}
	d.GetMemoryInfo_v2Func = func() (gonvml.Memory_v2, gonvml.Return) {
		used, ok := f.usedBytes(i)
		if !ok {
			return gonvml.Memory_v2{}, gonvml.ERROR_GPU_IS_LOST
		}
		return gonvml.Memory_v2{Version: 2, Total: totalBytes, Used: used, Free: totalBytes - used}, gonvml.SUCCESS
	}

	d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		g := f.gpus[i]
		if g.broken {
			return nil, gonvml.ERROR_GPU_IS_LOST
		}
		out := make([]gonvml.ProcessInfo, 0, len(g.procs))
		for pid, used := range g.procs {
			out = append(out, gonvml.ProcessInfo{Pid: pid, UsedGpuMemory: uint64(used) * mib})
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Pid < out[b].Pid })
		return out, gonvml.SUCCESS
	}

	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		used, ok := f.usedBytes(i)
		if !ok {
			return gonvml.Utilization{}, gonvml.ERROR_GPU_IS_LOST
		}
		// Simulated: both rates are the percentage of memory in use.
		pct := uint32(used * 100 / totalBytes)
		return gonvml.Utilization{Gpu: pct, Memory: pct}, gonvml.SUCCESS
	}
}

// fillLinks sets GPU i's P2P status, NVLink state and remote PCI info, and topology common
// ancestor with the fleet's other GPUs.
func (f *Fleet) fillLinks(i int, d *server.Device, facts modelFacts) {
	n := len(f.profile.GPUs)

	d.GetP2PStatusFunc = func(other gonvml.Device, _ gonvml.GpuP2PCapsIndex) (gonvml.GpuP2PStatus, gonvml.Return) {
		j := f.deviceIndex(other)
		switch {
		case j < 0:
			return gonvml.P2P_STATUS_UNKNOWN, gonvml.ERROR_INVALID_ARGUMENT
		case j == i || !f.profile.NVLink:
			return gonvml.P2P_STATUS_NOT_SUPPORTED, gonvml.SUCCESS
		default:
			return gonvml.P2P_STATUS_OK, gonvml.SUCCESS
		}
	}
	d.GetNvLinkStateFunc = func(link int) (gonvml.EnableState, gonvml.Return) {
		if !f.profile.NVLink || facts.nvlinks == 0 {
			return gonvml.FEATURE_DISABLED, gonvml.ERROR_NOT_SUPPORTED
		}
		if link < 0 || link >= facts.nvlinks {
			return gonvml.FEATURE_DISABLED, gonvml.ERROR_INVALID_ARGUMENT
		}
		return gonvml.FEATURE_ENABLED, gonvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(int) (gonvml.PciInfo, gonvml.Return) {
		// DGX GPUs reach each other through NVSwitches, which this simulation does not model.
		return gonvml.PciInfo{}, gonvml.ERROR_NOT_SUPPORTED
	}
	d.GetTopologyCommonAncestorFunc = func(other gonvml.Device) (gonvml.GpuTopologyLevel, gonvml.Return) {
		j := f.deviceIndex(other)
		switch {
		case j < 0:
			return 0, gonvml.ERROR_INVALID_ARGUMENT
		case j == i:
			return gonvml.TOPOLOGY_INTERNAL, gonvml.SUCCESS
		case numaNode(i, n) == numaNode(j, n):
			return gonvml.TOPOLOGY_NODE, gonvml.SUCCESS
		default:
			return gonvml.TOPOLOGY_SYSTEM, gonvml.SUCCESS
		}
	}
}

// fillEvents sets GPU i's supported event types (critical XIDs) and event registration.
func (f *Fleet) fillEvents(i int, d *server.Device) {
	d.GetSupportedEventTypesFunc = func() (uint64, gonvml.Return) {
		return gonvml.EventTypeXidCriticalError, gonvml.SUCCESS
	}
	d.RegisterEventsFunc = func(types uint64, set gonvml.EventSet) gonvml.Return {
		return f.register(i, types, set)
	}
}

// isBroken reports whether GPU i is broken by an injected XID.
func (f *Fleet) isBroken(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gpus[i].broken
}

// usedBytes is GPU i's simulated memory use in bytes; ok is false when the GPU is broken.
func (f *Fleet) usedBytes(i int) (used uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gpus[i]
	if g.broken {
		return 0, false
	}
	var sum int64
	for _, u := range g.procs {
		sum += u
	}
	return uint64(sum) * mib, true
}
