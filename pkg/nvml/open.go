package nvml

import (
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// DefaultPCIDevicesDir is sysfs's PCI device directory, Open's Options.PCIDevicesDir.
const DefaultPCIDevicesDir = "/sys/bus/pci/devices"

// Open loads the driver's NVML (libnvidia-ml.so.1 through go-nvml), initializes it and returns
// a backend named "nvml" with default Options (NUMA fallback from DefaultPCIDevicesDir), plus a
// closer that shuts NVML down. It fails with
// a clear error when the library is missing (no NVIDIA driver, or a container started without
// the NVIDIA runtime) or initialization fails (e.g. ERROR_DRIVER_NOT_LOADED, ERROR_NO_PERMISSION).
func Open() (device.Backend, func(), error) {
	return OpenWithOptions(Options{PCIDevicesDir: DefaultPCIDevicesDir})
}

// OpenWithOptions is Open with the given Options (Name defaults to "nvml").
func OpenWithOptions(opts Options) (device.Backend, func(), error) {
	return OpenLibrary("", opts)
}

// OpenLibrary is OpenWithOptions loading NVML from libraryPath (a path of libnvidia-ml.so.1,
// e.g. a driver root mounted into the container: the node agents' --nvml-library); "" loads
// libnvidia-ml.so.1 through the dynamic linker's search path, as Open does.
func OpenLibrary(libraryPath string, opts Options) (device.Backend, func(), error) {
	var lib gonvml.Interface
	if libraryPath != "" {
		lib = gonvml.New(gonvml.WithLibraryPath(libraryPath))
	} else {
		lib = gonvml.New()
	}
	err := call0("nvmlInit", "", lib.Init)
	if IsReturn(err, gonvml.ERROR_LIBRARY_NOT_FOUND) {
		if libraryPath != "" {
			return nil, nil, fmt.Errorf("NVML library %s not found or not loadable: check the driver root mounted into the container (%w)", libraryPath, err)
		}
		return nil, nil, fmt.Errorf("NVML library libnvidia-ml.so.1 not found: install the NVIDIA driver, "+
			"or run the container with the NVIDIA runtime so the driver's libraries are mounted (%w)", err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("initializing NVML: %w", err)
	}
	closer := func() {
		if err := call0("nvmlShutdown", "", lib.Shutdown); err != nil {
			klog.ErrorS(err, "Shutting NVML down")
		}
	}
	return NewBackend(lib, opts), closer, nil
}
