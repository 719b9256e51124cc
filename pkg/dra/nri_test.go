package dra

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/nri"
)

// case C37: in DRA mode the NRI plugin's Source reads a container's hami-go claims from its CDI
// devices and wants exactly the env of their CDI specs; other CDI devices are not hami-go's; a
// claim the driver has not prepared refuses the container (fail closed).
func TestNRISourceFromCDIDevices(t *testing.T) {
	d, _ := newTestDriver(t, testConfig(t.TempDir()), "dgxh100")
	c := testClaim("a", 4000, 25, result{device: "gpu-0", memMiB: 4000, cores: 25})
	if res := prepare(t, d, c)[c.UID]; res.Err != nil {
		t.Fatal(res.Err)
	}
	spec := specEnv(readSpec(t, d, c.UID))
	ctr := func(devs ...string) nri.Container {
		return nri.Container{PodUID: "pod-uid-a", PodNamespace: "default", PodName: "pod-a", Name: "main", CDIDevices: devs}
	}

	got, err := d.Granted(bg, ctr("nvidia.com/gpu=GPU-x", ClaimCDIDevice(c.UID)))
	if err != nil || !got.GPU || !reflect.DeepEqual(got.Env, spec) {
		t.Errorf("claimed container: %+v, %v; want GPU with the CDI spec's env %v", got, err, spec)
	}
	// HAMi-core's driver capabilities are added by the NRI plugin to the container's own, never
	// set by the CDI spec, whose env edit would replace an image's wider list.
	if _, inSpec := spec["NVIDIA_DRIVER_CAPABILITIES"]; inSpec || got.DriverCapabilities != "compute,utility" {
		t.Errorf("driver capabilities: in the CDI spec %v, granted %q; want only granted compute,utility", inSpec, got.DriverCapabilities)
	}
	if got, err := d.Granted(bg, ctr("nvidia.com/gpu=GPU-x")); err != nil || got.GPU {
		t.Errorf("no hami-go CDI device: %+v, %v; want no GPU", got, err)
	}
	if _, err := d.Granted(bg, ctr(ClaimCDIDevice("uid-unknown"))); err == nil ||
		!strings.Contains(err.Error(), "CDI device gpu.hami-go.io/claim=uid-unknown names claim uid-unknown, which the DRA driver has not prepared") {
		t.Errorf("unprepared claim: err %v", err)
	}

	// Through the NRI plugin: a CDI edit replaces the last entry of a name, so an envFrom value
	// before it is pinned; one the runtime kept after it is refused.
	g := nri.NewPlugin(d)
	env := []string{"CUDA_DEVICE_MEMORY_LIMIT_0=81920m"}
	for k, v := range spec {
		env = append(env, k+"="+v)
	}
	if adj, err := g.Decide(bg, ctr(ClaimCDIDevice(c.UID)), append(env, "NVIDIA_DRIVER_CAPABILITIES=graphics")); err != nil ||
		!containsChange(adj.Env, nri.EnvChange{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "graphics,compute,utility"}) {
		t.Errorf("claim's env last: %+v, %v; want NVIDIA_DRIVER_CAPABILITIES=graphics,compute,utility among the changes", adj, err)
	}
	_, err = g.Decide(bg, ctr(ClaimCDIDevice(c.UID)), append(env, "CUDA_DEVICE_MEMORY_LIMIT_0=81920m"))
	var r *nri.RefusedError
	if !errors.As(err, &r) || r.Want != "4000m" || r.Value != "81920m" {
		t.Errorf("a later 81920m: %v; want refused with 4000m allocated", err)
	}
}

// case C37: with the NVIDIA Container Toolkit's CDI devices (real GPUs), whose spec sets
// NVIDIA_VISIBLE_DEVICES=void after the claim's value, the NRI plugin does not want the claim's
// NVIDIA_VISIBLE_DEVICES: it empties the toolkit's "void" instead of refusing the container.
func TestNRISourceToolkitCDI(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.ToolkitCDIKind = DefaultToolkitCDIKind
	d, _ := newTestDriver(t, cfg, "dgxh100")
	c := testClaim("a", 4000, 0, result{device: "gpu-0", memMiB: 4000})
	if res := prepare(t, d, c)[c.UID]; res.Err != nil {
		t.Fatal(res.Err)
	}
	spec := specEnv(readSpec(t, d, c.UID))
	uuid := d.GPUs()[0].GPU.UUID
	ctr := nri.Container{PodNamespace: "default", PodName: "pod-a", Name: "main", CDIDevices: []string{ClaimCDIDevice(c.UID), "nvidia.com/gpu=" + uuid}}
	got, err := d.Granted(bg, ctr)
	if _, has := got.Env["NVIDIA_VISIBLE_DEVICES"]; err != nil || !got.GPU || has || got.Env["CUDA_DEVICE_MEMORY_LIMIT_0"] != "4000m" {
		t.Fatalf("Granted = %+v, %v; want the claim's env without NVIDIA_VISIBLE_DEVICES", got, err)
	}
	var env []string
	for k, v := range spec {
		if k == "NVIDIA_VISIBLE_DEVICES" {
			v = "void" // the toolkit's spec-level edit, applied after the claim's
		}
		env = append(env, k+"="+v)
	}
	ch, err := nri.NewPlugin(d).Decide(bg, ctr, env)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	for _, e := range ch.Env {
		if e.Name == "NVIDIA_VISIBLE_DEVICES" && e.Value != "" {
			t.Errorf("NVIDIA_VISIBLE_DEVICES set to %q, want emptied", e.Value)
		}
	}
}

func containsChange(chs []nri.EnvChange, want nri.EnvChange) bool {
	for _, ch := range chs {
		if ch == want {
			return true
		}
	}
	return false
}
