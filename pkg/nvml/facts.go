package nvml

import (
	"strconv"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hami-go/hami-go/pkg/device"
)

var _ device.FactsSource = (*backend)(nil)

// Facts reads the GPU's compute capability and architecture and the node's driver and CUDA
// versions. Each is optional (empty when NVML does not support the call); an unknown GPU or
// any other NVML failure is an error naming the call.
func (b *backend) Facts(uuid string) (device.GPUFacts, error) {
	var f device.GPUFacts
	h, err := b.handle(uuid)
	if err != nil {
		return f, err
	}
	type cc struct{ major, minor int }
	c, ok, err := optional("nvmlDeviceGetCudaComputeCapability", uuid, func() (cc, gonvml.Return) {
		ma, mi, ret := h.GetCudaComputeCapability()
		return cc{ma, mi}, ret
	})
	if err != nil {
		return f, err
	}
	if ok {
		f.ComputeCapability = strconv.Itoa(c.major) + "." + strconv.Itoa(c.minor)
	}
	arch, ok, err := optional("nvmlDeviceGetArchitecture", uuid, h.GetArchitecture)
	if err != nil {
		return f, err
	}
	if ok {
		f.Architecture = ArchitectureName(arch)
	}
	drv, ok, err := optional("nvmlSystemGetDriverVersion", "", b.lib.SystemGetDriverVersion)
	if err != nil {
		return f, err
	}
	if ok {
		f.DriverVersion = drv
	}
	cuda, ok, err := optional("nvmlSystemGetCudaDriverVersion", "", b.lib.SystemGetCudaDriverVersion)
	if err != nil {
		return f, err
	}
	if ok && cuda > 0 {
		// nvml.h: the version is 1000*major + 10*minor (NVML_CUDA_DRIVER_VERSION_MAJOR/MINOR).
		f.CUDADriverVersion = strconv.Itoa(cuda/1000) + "." + strconv.Itoa(cuda%1000/10)
	}
	return f, nil
}

// ArchitectureName names an NVML device architecture (nvml.h NVML_DEVICE_ARCH_*), "" when
// unknown.
func ArchitectureName(a gonvml.DeviceArchitecture) string {
	switch a {
	case gonvml.DEVICE_ARCH_KEPLER:
		return "Kepler"
	case gonvml.DEVICE_ARCH_MAXWELL:
		return "Maxwell"
	case gonvml.DEVICE_ARCH_PASCAL:
		return "Pascal"
	case gonvml.DEVICE_ARCH_VOLTA:
		return "Volta"
	case gonvml.DEVICE_ARCH_TURING:
		return "Turing"
	case gonvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case gonvml.DEVICE_ARCH_ADA:
		return "Ada"
	case gonvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case gonvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	}
	return ""
}
