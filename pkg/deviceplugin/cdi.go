package deviceplugin

import (
	"fmt"
	"strconv"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hami-go/hami-go/pkg/device"
)

// CDISpecName is the file name of the plugin's CDI spec in --cdi-spec-dir.
const CDISpecName = "hami-go-gpu.yaml"

// CDISpec describes every GPU as a CDI device named by its UUID (kind CDIKind, e.g.
// "hami-go.io/gpu=GPU-…"): the GPU's /dev/nvidia<index> node per device, and the driver's
// control nodes for all of them. Under the cdi strategy the NRI env guard adds a container's
// GPUs by these names when the runtime creates it.
func CDISpec(gpus []device.GPU) *cdispec.Spec {
	s := &cdispec.Spec{
		Version: cdispec.CurrentVersion,
		Kind:    CDIKind,
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{
			{Path: "/dev/nvidiactl"}, {Path: "/dev/nvidia-uvm"}, {Path: "/dev/nvidia-uvm-tools"},
		}},
	}
	for _, g := range gpus {
		s.Devices = append(s.Devices, cdispec.Device{
			Name: g.UUID,
			ContainerEdits: cdispec.ContainerEdits{
				DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidia" + strconv.Itoa(g.Index)}},
			},
		})
	}
	return s
}

// WriteCDISpec writes CDISpec(gpus) into dir through the CDI library (validated there).
func WriteCDISpec(dir string, gpus []device.GPU) error {
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	if err := c.WriteSpec(CDISpec(gpus), CDISpecName); err != nil {
		return fmt.Errorf("write CDI spec into --cdi-spec-dir %s: %w", dir, err)
	}
	return nil
}
