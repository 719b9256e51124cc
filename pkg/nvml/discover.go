package nvml

import (
	"strconv"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// mib is one mebibyte in bytes.
const mib = 1 << 20

// Discover lists the node's GPUs in NVML index order, all Healthy. Required per GPU: handle,
// UUID, name, memory info, PCI info and minor number (the device node /dev/nvidia<minor>); any failure there fails discovery with an *Error naming
// the call and the GPU. Optional (unknown when NVML cannot tell; other failures are errors):
//   - SM count: nvmlDeviceGetAttributes, which nvml.h documents for MIG device handles only, so
//     any failure falls back to SMCountOf(model); 0 = unknown.
//   - NUMA node: nvmlDeviceGetNumaNodeId, else Options.PCIDevicesDir/<bus id>/numa_node;
//     -1 = unknown.
//   - MIG mode: nvmlDeviceGetMigMode; false = disabled or not supported.
//   - NVLink peers: nvmlDeviceGetP2PStatus(NVML_P2P_CAPS_INDEX_NVLINK) == NVML_P2P_STATUS_OK,
//     asked for every ordered pair of GPUs; NOT_SUPPORTED = no peer.
//
// MemoryMiB is the total memory rounded down to whole MiB.
func (b *backend) Discover() ([]device.GPU, error) {
	n, err := call("nvmlDeviceGetCount", "", b.lib.DeviceGetCount)
	if err != nil {
		return nil, err
	}
	gpus := make([]device.GPU, 0, n)
	handles := make([]gonvml.Device, 0, n)
	for i := 0; i < n; i++ {
		h, g, err := b.discoverOne(i)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, g)
		handles = append(handles, h)
	}
	if err := b.nvlinkPeers(gpus, handles); err != nil {
		return nil, err
	}
	klog.V(2).InfoS("Discovered GPUs", "backend", b.opts.Name, "count", len(gpus))
	return gpus, nil
}

// discoverOne reads GPU i's attributes.
func (b *backend) discoverOne(i int) (gonvml.Device, device.GPU, error) {
	dev := "index " + strconv.Itoa(i)
	h, err := call("nvmlDeviceGetHandleByIndex", dev, func() (gonvml.Device, gonvml.Return) {
		return b.lib.DeviceGetHandleByIndex(i)
	})
	if err != nil {
		return nil, device.GPU{}, err
	}
	uuid, err := call("nvmlDeviceGetUUID", dev, h.GetUUID)
	if err != nil {
		return nil, device.GPU{}, err
	}
	dev = uuid
	g := device.GPU{UUID: uuid, Index: i, NUMANode: -1, Healthy: true}
	if g.Model, err = call("nvmlDeviceGetName", dev, h.GetName); err != nil {
		return nil, device.GPU{}, err
	}
	mem, err := call("nvmlDeviceGetMemoryInfo", dev, h.GetMemoryInfo)
	if err != nil {
		return nil, device.GPU{}, err
	}
	g.MemoryMiB = int64(mem.Total / mib)
	pci, err := call("nvmlDeviceGetPciInfo", dev, h.GetPciInfo)
	if err != nil {
		return nil, device.GPU{}, err
	}
	g.PCIBusID = busID(pci)
	// The device node is /dev/nvidia<minor>, not /dev/nvidia<index> (nvidia-ctk's rule:
	// nvidia-container-toolkit internal/platform-support/dgpu).
	if g.Minor, err = call("nvmlDeviceGetMinorNumber", dev, h.GetMinorNumber); err != nil {
		return nil, device.GPU{}, err
	}

	// nvmlDeviceGetAttributes "currently only supports MIG device handles" (nvml.h), so on a
	// full GPU any failure only means "not reported": fall back to the model's known count.
	if attrs, err := call("nvmlDeviceGetAttributes", dev, h.GetAttributes); err == nil && attrs.MultiprocessorCount > 0 {
		g.SMCount = int(attrs.MultiprocessorCount)
	} else {
		g.SMCount = SMCountOf(g.Model)
		klog.V(4).InfoS("SM count not reported by NVML; using the model's", "device", dev, "model", g.Model,
			"smCount", g.SMCount, "reason", errString(err))
	}
	numa, ok, err := optional("nvmlDeviceGetNumaNodeId", dev, h.GetNumaNodeId)
	if err != nil {
		return nil, device.GPU{}, err
	}
	if ok && numa >= 0 {
		g.NUMANode = numa
	} else if n, ok := sysfsNUMANode(b.opts.PCIDevicesDir, g.PCIBusID); ok {
		g.NUMANode = n
	}
	migCurrent, ok, err := optional("nvmlDeviceGetMigMode", dev, func() (int, gonvml.Return) {
		current, _, ret := h.GetMigMode() // the pending mode applies only after a GPU reset
		return current, ret
	})
	if err != nil {
		return nil, device.GPU{}, err
	}
	g.MIGEnabled = ok && migCurrent == gonvml.DEVICE_MIG_ENABLE
	return h, g, nil
}

// nvlinkPeers fills NVLinkPeers: GPU j is a peer of GPU i when NVML reports NVLink P2P between
// them as OK. NOT_SUPPORTED (no NVLink, or a mock without the function) means no peer.
func (b *backend) nvlinkPeers(gpus []device.GPU, handles []gonvml.Device) error {
	for i := range gpus {
		for j := range gpus {
			if i == j {
				continue
			}
			st, ok, err := optional("nvmlDeviceGetP2PStatus", gpus[i].UUID+" -> "+gpus[j].UUID,
				func() (gonvml.GpuP2PStatus, gonvml.Return) {
					return handles[i].GetP2PStatus(handles[j], gonvml.P2P_CAPS_INDEX_NVLINK)
				})
			if err != nil {
				return err
			}
			if ok && st == gonvml.P2P_STATUS_OK {
				gpus[i].NVLinkPeers = append(gpus[i].NVLinkPeers, gpus[j].UUID)
			}
		}
	}
	return nil
}

// busID returns NVML's PCI bus id string ("00000000:07:00.0"), the NUL-terminated BusId field.
func busID(p gonvml.PciInfo) string {
	buf := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		buf = append(buf, byte(c))
	}
	return string(buf)
}

// errString is err's text, or "" for nil.
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
