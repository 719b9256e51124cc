package fake

// Exported simulated facts, for simulators outside this package (hack/simgpu builds a simulated
// NVIDIA driver from the same profiles, so that it reports exactly what a Fleet reports).

// NUMANode is the simulated NUMA node of GPU i of n: the first half (rounded up) on node 0,
// the rest on node 1.
func NUMANode(i, n int) int { return numaNode(i, n) }

// PCIBusID is fake GPU i's NVML PCI bus id, "00000000:<i+1 in hex, 2 digits>:00.0".
func PCIBusID(i int) string { return pciBusID(i) }

// SMCount is the simulated streaming multiprocessor count of a model: pkg/nvml.SMCountOf, else
// 80 (a mid-size GPU).
func SMCount(model string) int { return int(factsFor(model).sms) }

// PCIDeviceID is the NVML pciDeviceId (16-bit device id << 16 | 16-bit vendor id 0x10DE) of GPU
// i of p: the named server's go-nvml GPU configuration, else the configuration a custom model
// starts from (the same as Fleet's mock server). i must be in 0..len(p.GPUs)-1.
func (p Profile) PCIDeviceID(i int) uint32 {
	if cfg, ok := namedServers()[p.Server]; ok {
		return cfg.PciDeviceId
	}
	return baseConfig(p.GPUs[i].Model).PciDeviceId
}

// NVLinks is the number of NVLink links of GPU i of p as a Fleet simulates them: the model's
// link count (A100 12; H100, H200, B200 18) on a profile with NVLink (the named DGX servers,
// all-to-all), else 0 (custom profiles have none). i must be in 0..len(p.GPUs)-1.
func (p Profile) NVLinks(i int) int {
	if !p.NVLink {
		return 0
	}
	return factsFor(p.GPUs[i].Model).nvlinks
}
