package deviceplugin

import (
	"fmt"
	"path"
	"strconv"

	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hami-go/hami-go/pkg/device"
)

// CDISpecName is the file name of the plugin's CDI spec in --cdi-spec-dir.
const CDISpecName = "hami-go-gpu.yaml"

// The driver's control device nodes (container paths), as nvidia-ctk names them
// (nvidia-container-toolkit v1.20.2 pkg/nvcdi common-nvml.go controlDeviceNodeDiscoverer).
// Required ones are always in the spec (CUDA needs them); optional ones only when the node has
// them under the dev root when the spec is written (nvidia-uvm-tools and nvidia-modeset are
// absent on many hosts, and a CDI device node that does not exist fails the container's
// creation).
var (
	requiredControlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm"}
	optionalControlNodes = []string{"/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}
)

// CDISpec describes every GPU as a CDI device named by its UUID (kind CDIKind, e.g.
// "hami-go.io/gpu=GPU-…"): the GPU's /dev/nvidia<minor> node per device (the driver's minor
// number, device.GPU.Minor, which need not equal the NVML index: nvidia-ctk's rule,
// internal/platform-support/dgpu), and the driver's control nodes for all of them. devRoot is
// the host root the /dev/nvidia* nodes are under ("/" or "" for the host's /dev; e.g.
// "/run/nvidia/driver"): a node is then read from <devRoot>/dev/... (CDI hostPath) and appears at
// /dev/... in the container. exists says whether a host path exists now (the optional control
// nodes). The driver's libraries are not here: the toolkit's own CDI device
// (Config.ToolkitCDIKind) brings them. Under the cdi strategy the NRI plugin adds a container's
// GPUs by these names when the runtime creates it.
func CDISpec(gpus []device.GPU, devRoot string, exists func(hostPath string) bool) *cdispec.Spec {
	node := func(p string) *cdispec.DeviceNode {
		n := &cdispec.DeviceNode{Path: p}
		if devRoot != "" && path.Clean(devRoot) != "/" {
			n.HostPath = path.Join(devRoot, p)
		}
		return n
	}
	hostPath := func(p string) string { return path.Join("/", devRoot, p) }
	s := &cdispec.Spec{Version: cdispec.CurrentVersion, Kind: CDIKind}
	for _, p := range requiredControlNodes {
		if !exists(hostPath(p)) {
			klog.InfoS("A required NVIDIA device node is missing; GPU containers will fail to start until it exists", "path", hostPath(p))
		}
		s.ContainerEdits.DeviceNodes = append(s.ContainerEdits.DeviceNodes, node(p))
	}
	for _, p := range optionalControlNodes {
		if exists(hostPath(p)) {
			s.ContainerEdits.DeviceNodes = append(s.ContainerEdits.DeviceNodes, node(p))
		}
	}
	for _, g := range gpus {
		s.Devices = append(s.Devices, cdispec.Device{
			Name: g.UUID,
			ContainerEdits: cdispec.ContainerEdits{
				DeviceNodes: []*cdispec.DeviceNode{node("/dev/nvidia" + strconv.Itoa(g.Minor))},
			},
		})
	}
	return s
}

// WriteCDISpec writes CDISpec(gpus, devRoot, exists) into dir through the CDI library
// (validated there).
func WriteCDISpec(dir string, gpus []device.GPU, devRoot string, exists func(hostPath string) bool) error {
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	if err := c.WriteSpec(CDISpec(gpus, devRoot, exists), CDISpecName); err != nil {
		return fmt.Errorf("write CDI spec into --cdi-spec-dir %s: %w", dir, err)
	}
	return nil
}
