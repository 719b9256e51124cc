package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// Environment of the real-GPU check (hack/gpu-check runs this test as a test binary).
const (
	// envGPUCheck must be "1" for TestGPUCheckNVML to run.
	envGPUCheck = "HAMI_GO_GPU_CHECK"
	// envGPUCheckOut is the folder the test writes gpuCheckValuesFile and gpuCheckEnvFile to
	// (default: a temporary folder).
	envGPUCheckOut = "HAMI_GO_GPU_CHECK_OUT"
	// envGPUCheckMPSPipe is the MPS pipe directory the plugin hands out (default /tmp/nvidia-mps).
	envGPUCheckMPSPipe = "HAMI_GO_GPU_CHECK_MPS_PIPE_DIR"
	// gpuCheckValuesFile lists every comparison ({what, want, got, ok}, hack/gpu-check's Value).
	gpuCheckValuesFile = "device-plugin-values.json"
	// gpuCheckEnvFile is the container's env as the NRI plugin sets it (a JSON object) for the
	// MPS check.
	gpuCheckEnvFile = "allocate-env.json"
)

// gpuCheckValue is one comparison, in hack/gpu-check's Value JSON shape.
type gpuCheckValue struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	OK   bool   `json:"ok"`
}

// TestGPUCheckNVML is the device-plugin part of the real-GPU check (hack/gpu-check/README.md):
// the plugin over the driver's NVML, in MPS enforcement mode with split count 4, served to the
// in-process stand-in kubelet of the unit tests. It checks registration, ListAndWatch (4 healthy
// slices per real GPU, NUMA topology), Allocate (the pending answer) and the env the NRI plugin
// gives the container of a pod planned on GPU 0 with 4000 MiB and 25% (the real UUID, the MPS
// limits), that the XID watch runs until its context ends, and that probes and process queries
// answer. Skipped unless
// HAMI_GO_GPU_CHECK=1: `make test` has no GPU.
func TestGPUCheckNVML(t *testing.T) {
	if os.Getenv(envGPUCheck) != "1" {
		t.Skip("real-GPU check: runs only with " + envGPUCheck + "=1 on a machine with an NVIDIA GPU and driver (make gpu-check, hack/gpu-check/README.md)")
	}
	out := os.Getenv(envGPUCheckOut)
	if out == "" {
		out = t.TempDir()
	}
	pipe := os.Getenv(envGPUCheckMPSPipe)
	if pipe == "" {
		pipe = Defaults().MPSPipeDir
	}
	var vals []gpuCheckValue
	check := func(what, want, got string) {
		t.Helper()
		vals = append(vals, gpuCheckValue{What: what, Want: want, Got: got, OK: want == got})
		if want != got {
			t.Errorf("%s = %q, want %q", what, got, want)
		}
	}
	t.Cleanup(func() {
		b, _ := json.MarshalIndent(vals, "", "  ")
		if err := os.WriteFile(filepath.Join(out, gpuCheckValuesFile), b, 0o644); err != nil {
			t.Errorf("writing %s: %v", gpuCheckValuesFile, err)
		}
	})

	b, closer, err := nvml.Open()
	if err != nil {
		check("nvml.Open", "ok", err.Error())
		t.FailNow()
	}
	t.Cleanup(closer)
	gpus, err := b.Discover()
	if err != nil || len(gpus) == 0 {
		check("Discover", ">= 1 GPU", strconv.Itoa(len(gpus))+" GPUs, error "+errText(err))
		t.FailNow()
	}
	g := gpus[0]

	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	cfg := testConfig(dir)
	cfg.SplitCount = 4
	cfg.Enforcement = gpuenv.EnforceMPS
	cfg.MPSPipeDir = pipe
	p, err := New(cfg, b, Options{WatchInterval: 20 * time.Millisecond}, nil)
	if err != nil {
		check("New", "ok", err.Error())
		t.FailNow()
	}
	p.canApplyPlans = func(bool) error { return nil } // the NRI plugin is connected
	startServe(t, p)
	r := k.waitRegistration(t, 10*time.Second)
	check("registration version", pluginapi.Version, r.Version)
	check("registration endpoint", SocketName, r.Endpoint)
	check("registration resource", device.DefaultResourceNames().Count, r.ResourceName)
	c := k.client(t, r.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	s, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	lw, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var avail []string
	healthy := 0
	for _, d := range lw.Devices {
		avail = append(avail, d.ID)
		if d.Health == pluginapi.Healthy {
			healthy++
		}
	}
	check("ListAndWatch devices", strconv.Itoa(4*len(gpus)), strconv.Itoa(len(lw.Devices)))
	check("ListAndWatch healthy devices", strconv.Itoa(4*len(gpus)), strconv.Itoa(healthy))
	if len(lw.Devices) > 0 {
		d := lw.Devices[0]
		check("ListAndWatch device 0 id", device.SliceID(g.UUID, 0), d.ID)
		topo := "none"
		if d.Topology != nil && len(d.Topology.Nodes) == 1 {
			topo = strconv.FormatInt(d.Topology.Nodes[0].ID, 10)
		}
		want := "none"
		if g.NUMANode >= 0 {
			want = strconv.Itoa(g.NUMANode)
		}
		check("ListAndWatch device 0 NUMA node", want, topo)
	}

	pod := testPod("gpu-check", time.Now(), testNode, ctr{name: "main", mem: 4000, cores: 25, gpus: []string{g.UUID}})
	p.Ledger().UpsertPod(pod)
	ar, err := c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: avail[len(avail)-1:]}}})
	if err != nil {
		check("Allocate", "ok", err.Error())
		t.FailNow()
	}
	pending, ok := ar.ContainerResponses[0].Envs[device.EnvGPUUUIDs]
	check("Allocate: the pending answer (an empty "+device.EnvGPUUUIDs+")", "true", strconv.FormatBool(ok && pending == "" && len(ar.ContainerResponses[0].Envs) == 1))
	cr, err := create(t, p, pod, "main", avail[len(avail)-1])
	if err != nil {
		check("the NRI plugin at container creation", "ok", err.Error())
		t.FailNow()
	}
	env := cr.Envs
	cvd, cvdSet := env[gpuenv.EnvCUDAVisibleDevices]
	check("container "+gpuenv.EnvCUDAVisibleDevices+" (never set: the container sees only its own GPUs)", "unset", map[bool]string{true: "set to " + cvd, false: "unset"}[cvdSet])
	check("container "+device.EnvGPUUUIDs, g.UUID, env[device.EnvGPUUUIDs])
	check("container "+gpuenv.EnvCUDADeviceOrder, gpuenv.CUDADeviceOrderPCI, env[gpuenv.EnvCUDADeviceOrder])
	check("container "+gpuenv.EnvNVIDIAVisibleDevices, g.UUID, env[gpuenv.EnvNVIDIAVisibleDevices])
	check("container "+gpuenv.EnvMPSPinnedMemLimit, "0=4000M", env[gpuenv.EnvMPSPinnedMemLimit])
	check("container "+gpuenv.EnvMPSActiveThreadPct, "25", env[gpuenv.EnvMPSActiveThreadPct])
	check("container "+gpuenv.EnvMPSPipeDirectory, pipe, env[gpuenv.EnvMPSPipeDirectory])
	check("container "+device.EnvGPUMemoryMiB, "4000", env[device.EnvGPUMemoryMiB])
	check("container "+device.EnvGPUModel, device.RayAcceleratorType(g.Model), env[device.EnvGPUModel])
	eb, _ := json.MarshalIndent(env, "", "  ")
	if err := os.WriteFile(filepath.Join(out, gpuCheckEnvFile), eb, 0o644); err != nil {
		t.Errorf("writing %s: %v", gpuCheckEnvFile, err)
	}

	uuids := make([]string, len(gpus))
	for i, x := range gpus {
		uuids[i] = x.UUID
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer wcancel()
	werr := b.WatchXIDs(wctx, uuids, make(chan device.XIDEvent, 64))
	check("XID watch ends with its context after 2s", context.DeadlineExceeded.Error(), errText(werr))
	if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
		t.Logf("XID watch: %v", werr)
	}
	for _, u := range uuids {
		check("probe "+u, "<nil>", errText(b.Probe(u)))
		_, perr := b.Processes(u)
		check("processes "+u, "<nil>", errText(perr))
		check("healthy "+u, "true", strconv.FormatBool(p.Health().Healthy(u)))
	}
}

// errText is err's text, "<nil>" for nil.
func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
