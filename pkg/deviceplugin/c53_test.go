package deviceplugin

import (
	"reflect"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C53: hami-go's CDI spec names each GPU's device node by the driver's minor number, not
// its NVML index; with a dev root (--dev-root / --driver-root, e.g. the GPU Operator's
// /run/nvidia/driver) every node is read from <root>/dev (hostPath) and appears at /dev in the
// container; the optional control nodes (nvidia-uvm-tools, nvidia-modeset) are listed only when
// the host has them, the required ones (nvidiactl, nvidia-uvm) always.
func TestC53CDISpecMinorsDevRootAndOptionalNodes(t *testing.T) {
	gpus := []device.GPU{{UUID: "GPU-A", Index: 0, Minor: 3}, {UUID: "GPU-B", Index: 1, Minor: 0}}
	present := map[string]bool{"/run/nvidia/driver/dev/nvidia-modeset": true}
	s := CDISpec(gpus, "/run/nvidia/driver", func(p string) bool { return present[p] })
	nodes := func(ns []*cdispec.DeviceNode) [][2]string {
		var out [][2]string
		for _, n := range ns {
			out = append(out, [2]string{n.Path, n.HostPath})
		}
		return out
	}
	wantCommon := [][2]string{
		{"/dev/nvidiactl", "/run/nvidia/driver/dev/nvidiactl"},
		{"/dev/nvidia-uvm", "/run/nvidia/driver/dev/nvidia-uvm"},
		{"/dev/nvidia-modeset", "/run/nvidia/driver/dev/nvidia-modeset"},
	}
	if got := nodes(s.ContainerEdits.DeviceNodes); !reflect.DeepEqual(got, wantCommon) {
		t.Errorf("control nodes %q; want %q (no nvidia-uvm-tools: the host lacks it)", got, wantCommon)
	}
	for i, want := range [][2]string{{"/dev/nvidia3", "/run/nvidia/driver/dev/nvidia3"}, {"/dev/nvidia0", "/run/nvidia/driver/dev/nvidia0"}} {
		if got := nodes(s.Devices[i].ContainerEdits.DeviceNodes); !reflect.DeepEqual(got, [][2]string{want}) {
			t.Errorf("%s: nodes %q; want %q (minor %d, index %d)", s.Devices[i].Name, got, want, gpus[i].Minor, gpus[i].Index)
		}
	}

	// The host's own /dev: no hostPath; every optional node there is listed.
	dir := t.TempDir()
	if err := WriteCDISpec(dir, gpus, "/", func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	d := c.GetDevice(CDIKind + "=GPU-A")
	if d == nil {
		t.Fatalf("GPU-A not in the written spec: %v", c.GetErrors())
	}
	if got := nodes(d.ContainerEdits.DeviceNodes); !reflect.DeepEqual(got, [][2]string{{"/dev/nvidia3", ""}}) {
		t.Errorf("host /dev: GPU-A nodes %q; want /dev/nvidia3 without a hostPath", got)
	}
	if got := len(d.GetSpec().ContainerEdits.DeviceNodes); got != 4 {
		t.Errorf("host /dev with every node present: %d control nodes; want 4", got)
	}
}

// case C53: under the cdi strategy a plan names the toolkit's nvidia.com/gpu=<UUID> beside
// hami-go.io/gpu=<UUID> (the toolkit's device brings libcuda.so.1 and libnvidia-ml.so.1), and
// --toolkit-cdi-kind changes the kind or, empty, leaves it out.
func TestC53PlanNamesTheToolkitsDevice(t *testing.T) {
	for _, tc := range []struct {
		kind string
		want []string
	}{
		{DefaultToolkitCDIKind, []string{"hami-go.io/gpu=GPU-A", "nvidia.com/gpu=GPU-A"}},
		{"example.com/gpu", []string{"hami-go.io/gpu=GPU-A", "example.com/gpu=GPU-A"}},
		{"", []string{"hami-go.io/gpu=GPU-A"}},
	} {
		cfg := testConfig(t.TempDir())
		cfg.DeviceListStrategy = StrategyCDI
		cfg.ToolkitCDIKind = tc.kind
		r := responder{cfg: cfg, gpus: map[string]device.GPU{"GPU-A": {UUID: "GPU-A"}}, exists: func(string) bool { return false }}
		e := r.build(claimOf("GPU-A", 1000))
		if !reflect.DeepEqual(e.CDIDevices, tc.want) {
			t.Errorf("--toolkit-cdi-kind=%q: CDI devices %q; want %q", tc.kind, e.CDIDevices, tc.want)
		}
	}
}
