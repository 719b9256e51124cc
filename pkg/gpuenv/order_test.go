package gpuenv

import (
	"math/rand"
	"reflect"
	"strconv"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// Three GPUs of one container, given out of PCI order (the kubelet's or the claim's order), with
// their own limits. NVML bus ids as NVML spells them; GPU-C's bus id in the 4-digit domain form.
var unordered = []Grant{
	{UUID: "GPU-B", PCIBusID: "00000000:41:00.0", MemoryMiB: 30000, CoresPercent: 50},
	{UUID: "GPU-C", PCIBusID: "0000:C1:00.0", MemoryMiB: 20000},
	{UUID: "GPU-A", PCIBusID: "00000000:07:00.0", MemoryMiB: 10000, CoresPercent: 20},
}

// Issue 36 item 2, cases C19, C22: every positional value follows the PCI order of the
// container's GPUs, each GPU keeps its own memory and compute limit, and CUDA_VISIBLE_DEVICES
// (which HAMi-core parses with atoi) is never set; CUDA_DEVICE_ORDER pins CUDA to PCI order.
func TestBuildPCIOrderC19(t *testing.T) {
	for _, visible := range []bool{false, true} {
		cfg := hamiCfg()
		cfg.NVIDIAVisibleDevices = visible
		e := Build(cfg, Request{Grants: unordered, CacheName: "c"}, all)
		want := map[string]string{
			device.EnvGPUUUIDs:                "GPU-A,GPU-B,GPU-C",
			"CUDA_DEVICE_ORDER":               "PCI_BUS_ID",
			"CUDA_DEVICE_MEMORY_LIMIT_0":      "10000m",
			"CUDA_DEVICE_MEMORY_LIMIT_1":      "30000m",
			"CUDA_DEVICE_MEMORY_LIMIT_2":      "20000m",
			"CUDA_DEVICE_SM_LIMIT_0":          "20",
			"CUDA_DEVICE_SM_LIMIT_1":          "50",
			device.EnvGPUMemoryMiB:            "60000",
			"LIBCUDA_LOG_LEVEL":               "1",
			"CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/c.cache",
			device.EnvGPUModel:                device.UnknownModel,
		}
		if visible {
			want["NVIDIA_VISIBLE_DEVICES"] = "GPU-A,GPU-B,GPU-C"
		}
		if !reflect.DeepEqual(e.Env, want) {
			t.Errorf("NVIDIAVisibleDevices=%v: env\n%v\nwant\n%v", visible, e.Env, want)
		}
	}
}

// The MPS ordinals follow the same order.
func TestBuildPCIOrderMPS(t *testing.T) {
	e := Build(Config{Enforcement: EnforceMPS, MPSPipeDir: "/tmp/nvidia-mps"}, Request{Grants: unordered}, all)
	if got := e.Env[EnvMPSPinnedMemLimit]; got != "0=10000M,1=30000M,2=20000M" {
		t.Errorf("%s = %q", EnvMPSPinnedMemLimit, got)
	}
	if _, ok := e.Env[EnvCUDAVisibleDevices]; ok {
		t.Errorf("%s set under MPS", EnvCUDAVisibleDevices)
	}
}

// case C19 property: whatever order the grants come in, every (UUID, limit) pair is kept and
// the positions are the PCI order.
func TestBuildPCIOrderAnyInputOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(36))
	for n := 0; n < 200; n++ {
		g := append([]Grant(nil), unordered...)
		rng.Shuffle(len(g), func(i, j int) { g[i], g[j] = g[j], g[i] })
		e := Build(hamiCfg(), Request{Grants: g}, all)
		for i, uuid := range []string{"GPU-A", "GPU-B", "GPU-C"} {
			mem := map[string]int64{"GPU-A": 10000, "GPU-B": 30000, "GPU-C": 20000}[uuid]
			if got := e.Env[EnvHAMiMemoryLimitPrefix+strconv.Itoa(i)]; got != strconv.FormatInt(mem, 10)+"m" {
				t.Fatalf("order %v: limit %d = %q, want %s's %dm", g, i, got, uuid, mem)
			}
		}
	}
}

// A grant without a bus id keeps its place before the known ones; "" never reorders others.
func TestPCIOrderUnknownBusID(t *testing.T) {
	got := PCIOrder([]Grant{{UUID: "b", PCIBusID: "00000000:02:00.0"}, {UUID: "x"}, {UUID: "a", PCIBusID: "00000000:01:00.0"}, {UUID: "y"}})
	var ids []string
	for _, g := range got {
		ids = append(ids, g.UUID)
	}
	if !reflect.DeepEqual(ids, []string{"x", "y", "a", "b"}) {
		t.Errorf("PCIOrder = %v", ids)
	}
}

// Issue 36 item 8: HAMi-core's /overrideEnv is masked read-only whether or not the library is
// the node's, and the log level is set; no mask outside hami-core.
func TestBuildMasksOverrideEnv(t *testing.T) {
	for _, ex := range []func(string) bool{all, func(string) bool { return false }} {
		e := Build(hamiCfg(), Request{Grants: grants, CacheName: "c"}, ex)
		found := false
		for _, m := range e.Mounts {
			found = found || m == Mount{ContainerPath: "/overrideEnv", HostPath: "/dev/null", ReadOnly: true}
		}
		if !found || e.Env["LIBCUDA_LOG_LEVEL"] != "1" {
			t.Errorf("mounts %+v, LIBCUDA_LOG_LEVEL %q", e.Mounts, e.Env["LIBCUDA_LOG_LEVEL"])
		}
	}
	e := Build(Config{Enforcement: EnforceNone}, Request{Grants: grants}, all)
	if len(e.Mounts) != 0 || e.Env["LIBCUDA_LOG_LEVEL"] != "" {
		t.Errorf("enforcement none: mounts %+v env %v", e.Mounts, e.Env)
	}
}
