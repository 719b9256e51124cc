package dra

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// Environment of the real-GPU check (hack/gpu-check runs this test as a test binary).
const (
	// envGPUCheck must be "1" for TestGPUCheckDRA to run.
	envGPUCheck = "HAMI_GO_GPU_CHECK"
	// envGPUCheckOut is the folder the test writes gpuCheckReportFile, gpuCheckSliceFile and
	// gpuCheckCDIFile to (default: a temporary folder).
	envGPUCheckOut = "HAMI_GO_GPU_CHECK_OUT"
	// gpuCheckReportFile is the gpuCheckReport (JSON) hack/gpu-check compares with nvidia-smi.
	gpuCheckReportFile = "dra-driver.json"
	// gpuCheckSliceFile is the published devices as the API would see them (JSON list of
	// resource.k8s.io/v1 Device), for people.
	gpuCheckSliceFile = "dra-resourceslice-devices.json"
	// gpuCheckCDIFile is a copy of the prepared claim's CDI spec.
	gpuCheckCDIFile = "dra-cdi-spec.json"
	// gpuCheckSplitCount is the sharers capacity the check's driver publishes.
	gpuCheckSplitCount = 4
	// gpuCheckMemMiB and gpuCheckCores are the hand-built claim's consumed capacity.
	gpuCheckMemMiB, gpuCheckCores = 4000, 25
)

// gpuCheckDevice is one published device in hack/gpu-check's flat form: attribute values
// rendered as strings (string, int, bool or version), capacity values as integers in the
// capacity's unit (memory: bytes, cores: percent, sharers: count).
type gpuCheckDevice struct {
	Name       string            `json:"name"`
	Attributes map[string]string `json:"attributes"`
	Capacity   map[string]string `json:"capacity"`
	Taints     int               `json:"taints"`
}

// gpuCheckReport is what TestGPUCheckDRA writes to gpuCheckReportFile (hack/gpu-check's
// draReport has the same JSON shape).
type gpuCheckReport struct {
	// Error is the first failing step ("" when every step worked).
	Error string `json:"error,omitempty"`
	// SplitCount is the driver's --split-count.
	SplitCount int `json:"splitCount"`
	// Devices are the ResourceSlice's devices, in the driver's order.
	Devices []gpuCheckDevice `json:"devices"`
	// Prepared is the device of the hand-built claim (gpu-<index>), MemoryMiB and Cores its
	// consumed capacity.
	Prepared  string `json:"prepared"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int64  `json:"cores"`
	// PrepareError is the claim's Prepare error ("" on success).
	PrepareError string `json:"prepareError,omitempty"`
	// CDIDevices are the CDI ids Prepare returned.
	CDIDevices []string `json:"cdiDevices"`
	// Env is the claim's CDI spec env (NAME -> value).
	Env map[string]string `json:"env"`
}

// flatDevice renders d in gpuCheckDevice form.
func flatDevice(d resourceapi.Device) gpuCheckDevice {
	f := gpuCheckDevice{Name: d.Name, Attributes: map[string]string{}, Capacity: map[string]string{}, Taints: len(d.Taints)}
	for k, a := range d.Attributes {
		switch {
		case a.StringValue != nil:
			f.Attributes[string(k)] = *a.StringValue
		case a.IntValue != nil:
			f.Attributes[string(k)] = strconv.FormatInt(*a.IntValue, 10)
		case a.BoolValue != nil:
			f.Attributes[string(k)] = strconv.FormatBool(*a.BoolValue)
		case a.VersionValue != nil:
			f.Attributes[string(k)] = *a.VersionValue
		}
	}
	for k, c := range d.Capacity {
		f.Capacity[string(k)] = strconv.FormatInt(c.Value.Value(), 10)
	}
	return f
}

// TestGPUCheckDRA is the DRA part of the real-GPU check (hack/gpu-check/README.md, check
// dra-driver): the driver over the machine's NVML (hami-core enforcement, split count 4, the
// sysfs PCIe-root reader of cmd/dra-driver) builds the ResourceSlice it would publish (Driver.Resources,
// i.e. Devices) and prepares one hand-built claim allocated 4000 MiB and 25% of GPU 0, writing
// its CDI spec into a temporary CDI directory. It writes what was published and prepared to
// gpuCheckReportFile; hack/gpu-check compares that with nvidia-smi and sysfs. Skipped unless
// HAMI_GO_GPU_CHECK=1: `make test` has no GPU.
func TestGPUCheckDRA(t *testing.T) {
	if os.Getenv(envGPUCheck) != "1" {
		t.Skip("real-GPU check: runs only with " + envGPUCheck + "=1 on a machine with an NVIDIA GPU and driver (make gpu-check, hack/gpu-check/README.md)")
	}
	out := os.Getenv(envGPUCheckOut)
	if out == "" {
		out = t.TempDir()
	}
	b, closer, err := nvml.Open()
	if err != nil {
		writeGPUCheckReport(t, out, gpuCheckReport{Error: "nvml.Open: " + err.Error()})
		t.Fatalf("nvml.Open: %v", err)
	}
	t.Cleanup(closer)
	rep := gpuCheckRun(t, b, out, sysfsPCIeRoot)
	writeGPUCheckReport(t, out, rep)
	if rep.Error != "" || rep.PrepareError != "" {
		t.Fatalf("step failed: %s%s", rep.Error, rep.PrepareError)
	}
}

// writeGPUCheckReport writes rep to out/gpuCheckReportFile.
func writeGPUCheckReport(t *testing.T, out string, rep gpuCheckReport) {
	t.Helper()
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(out, gpuCheckReportFile), b, 0o644); err != nil {
		t.Errorf("writing %s: %v", gpuCheckReportFile, err)
	}
}

// gpuCheckRun builds a driver over b (hami-core enforcement, split count 4, PCIe roots from
// pcieRoot), takes the devices of its ResourceSlice and prepares one claim allocated 4000 MiB
// and 25% of its first GPU; it writes the devices and the CDI spec to out and returns the
// report (Error names the first failing step).
func gpuCheckRun(t *testing.T, b device.Backend, out string, pcieRoot func(string) string) gpuCheckReport {
	t.Helper()
	rep := gpuCheckReport{SplitCount: gpuCheckSplitCount, MemoryMiB: gpuCheckMemMiB, Cores: gpuCheckCores}
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.NodeName = "gpu-check"
	cfg.SplitCount = gpuCheckSplitCount
	cfg.Enforcement = gpuenv.EnforceHAMiCore
	d, err := New(cfg, b, Options{PCIeRoot: pcieRoot})
	if err != nil {
		rep.Error = "New: " + err.Error()
		return rep
	}
	pool := d.Resources().Pools[cfg.NodeName]
	if len(pool.Slices) != 1 {
		rep.Error = fmt.Sprintf("Resources: %d slices in pool %s, want 1", len(pool.Slices), cfg.NodeName)
		return rep
	}
	devs := pool.Slices[0].Devices
	for _, dv := range devs {
		rep.Devices = append(rep.Devices, flatDevice(dv))
	}
	sb, _ := json.MarshalIndent(devs, "", "  ")
	if err := os.WriteFile(filepath.Join(out, gpuCheckSliceFile), sb, 0o644); err != nil {
		t.Errorf("writing %s: %v", gpuCheckSliceFile, err)
	}
	gpus := d.GPUs()
	if len(gpus) == 0 {
		rep.Error = "Discover: no GPU outside MIG mode"
		return rep
	}

	rep.Prepared = DeviceName(gpus[0].GPU.Index)
	c := testClaim("gpu-check", gpuCheckMemMiB, gpuCheckCores, result{device: rep.Prepared, memMiB: gpuCheckMemMiB, cores: gpuCheckCores})
	c.Status.Allocation.Devices.Results[0].Pool = cfg.NodeName
	res, err := d.PrepareResourceClaims(bg, []*resourceapi.ResourceClaim{c})
	if err != nil {
		rep.Error = "PrepareResourceClaims: " + err.Error()
		return rep
	}
	pr := res[c.UID]
	if pr.Err != nil {
		rep.PrepareError = pr.Err.Error()
		return rep
	}
	for _, dv := range pr.Devices {
		rep.CDIDevices = append(rep.CDIDevices, dv.CDIDeviceIDs...)
	}
	sort.Strings(rep.CDIDevices)
	rep.Env, err = gpuCheckSpecEnv(filepath.Join(cfg.CDIDir, ClaimSpecName(c.UID)), c.UID, filepath.Join(out, gpuCheckCDIFile))
	if err != nil {
		rep.Error = "CDI spec: " + err.Error()
	}
	return rep
}

// gpuCheckSpecEnv reads the CDI spec at path, copies it to copyTo and returns the env of its device
// uid.
func gpuCheckSpecEnv(path string, uid types.UID, copyTo string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	_ = os.WriteFile(copyTo, raw, 0o644)
	var s cdispec.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	for _, dv := range s.Devices {
		if dv.Name != string(uid) {
			continue
		}
		env := map[string]string{}
		for _, kv := range dv.ContainerEdits.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		return env, nil
	}
	return nil, fmt.Errorf("%s has no device %s", path, uid)
}

// sysfsPCIeRoot is cmd/dra-driver's PCIe root reader (deviceattribute reads sysfs).
func sysfsPCIeRoot(bus string) string {
	a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(bus)
	if err != nil || a.Value.StringValue == nil {
		return ""
	}
	return *a.Value.StringValue
}

// TestGPUCheckRunOnFakeFleet runs the real-GPU check's steps (gpuCheckRun) on the fake fleet
// "2x24576:NVIDIA A10", so the report hack/gpu-check compares is checked here without a GPU:
// two devices with the whole memory in bytes, cores 100, sharers 4, and the claim's CDI env
// with the UUID of GPU 0 and the HAMi-core limits.
func TestGPUCheckRunOnFakeFleet(t *testing.T) {
	b, _ := fakeBackend(t, "2x24576:NVIDIA A10")
	gpus, err := b.Discover()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	rep := gpuCheckRun(t, b, out, func(string) string { return "pci0000:00" })
	if rep.Error != "" || rep.PrepareError != "" {
		t.Fatalf("report errors: %q %q", rep.Error, rep.PrepareError)
	}
	if len(rep.Devices) != 2 {
		t.Fatalf("%d devices, want 2", len(rep.Devices))
	}
	d := rep.Devices[0]
	for k, want := range map[string]string{
		string(draapi.CapacityMemory): strconv.FormatInt(24576*MiB, 10), string(draapi.CapacityCores): "100", string(draapi.CapacitySharers): "4",
	} {
		if d.Capacity[k] != want {
			t.Errorf("capacity %s = %q, want %q", k, d.Capacity[k], want)
		}
	}
	if d.Name != "gpu-0" || d.Attributes[string(draapi.AttrUUID)] != gpus[0].UUID || d.Attributes[string(draapi.AttrIndex)] != "0" ||
		d.Attributes[string(draapi.AttrProductName)] != "NVIDIA A10" || d.Attributes[string(deviceattribute.StandardDeviceAttributePCIeRoot)] != "pci0000:00" {
		t.Errorf("device 0 = %+v", d)
	}
	if rep.Prepared != "gpu-0" || len(rep.CDIDevices) == 0 {
		t.Errorf("prepared %q, CDI devices %v", rep.Prepared, rep.CDIDevices)
	}
	for k, want := range map[string]string{
		device.EnvGPUUUIDs: gpus[0].UUID, gpuenv.EnvHAMiMemoryLimitPrefix + "0": "4000m", gpuenv.EnvHAMiSMLimit + "_0": "25",
		gpuenv.EnvCUDADeviceOrder: gpuenv.CUDADeviceOrderPCI,
	} {
		if rep.Env[k] != want {
			t.Errorf("CDI env %s = %q, want %q (env %v)", k, rep.Env[k], want, rep.Env)
		}
	}
	if v, ok := rep.Env[gpuenv.EnvCUDAVisibleDevices]; ok {
		t.Errorf("CDI env sets %s=%q; the container sees only its own GPUs", gpuenv.EnvCUDAVisibleDevices, v)
	}
	for _, f := range []string{gpuCheckSliceFile, gpuCheckCDIFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}
