package main

// Tests of the CUDA half of simgpu: the simulated libcuda (c/cuda_*.c), cudaprobe and cudatest,
// built with c/build.sh and run against an in-process daemon (hack/simgpu/daemon) serving the
// dgxh100 profile, with device nodes made by MakeNodes (`simgpu mknod`) under a private SIMGPU_DEV_ROOT. They need
// gcc and root (mknod of char devices); elsewhere they skip and say why.

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/hack/simgpu/daemon"
	"github.com/hami-go/hami-go/pkg/fake"
)

// probeDevice and probeResult mirror cudaprobe's JSON (c/cudaprobe.c).
type probeDevice struct {
	Index      int    `json:"index"`
	UUID       string `json:"uuid"`
	Name       string `json:"name"`
	TotalMiB   int64  `json:"total_mib"`
	FreeMiB    int64  `json:"free_mib"`
	AllocMiB   int64  `json:"alloc_mib"`
	AllocError string `json:"alloc_error"`
}

type probeResult struct {
	Devices []probeDevice     `json:"devices"`
	LibVGPU bool              `json:"libvgpu"`
	Env     map[string]string `json:"env"`
	Error   string            `json:"error"`
}

// cudaEnv is one test's simulated node: built libraries, a daemon and a device root.
type cudaEnv struct {
	out, socket, devRoot, node string
	devs                       []daemon.Device
}

const h100MiB = 81920

// requireCUDATools skips unless gcc is installed and the test runs as root.
func requireCUDATools(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is not installed: the simulated libcuda cannot be built")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: mknod of the /dev/nvidia<minor> char devices needs root")
	}
}

// buildCUDA runs c/build.sh into a fresh directory.
func buildCUDA(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("sh", "c/build.sh", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("c/build.sh: %v\n%s", err, b)
	}
	return out
}

// startDaemon serves profile for node on a socket in a temporary directory until the test ends.
func startDaemon(t *testing.T, node, profile string) (string, []daemon.Device) {
	t.Helper()
	devs, err := daemon.Devices(node, profile)
	if err != nil {
		t.Fatal(err)
	}
	// A short path: Unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "simgpu")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "socket")
	ln, err := daemon.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = daemon.New(daemon.Config{Devices: devs}).Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	})
	return sock, devs
}

// makeNodes creates <root>/dev/nvidia<minor> for every device with MakeNodes (`simgpu mknod`).
func makeNodes(t *testing.T, root string, devs []daemon.Device) {
	t.Helper()
	var minors []int
	for _, d := range devs {
		minors = append(minors, d.Minor)
	}
	if err := MakeNodes(root, minors); err != nil {
		t.Fatal(err)
	}
}

func newCUDAEnv(t *testing.T, out string) *cudaEnv {
	t.Helper()
	node := "cuda-" + strings.ReplaceAll(t.Name(), "/", "-")
	sock, devs := startDaemon(t, node, "dgxh100")
	root := t.TempDir()
	makeNodes(t, root, devs)
	return &cudaEnv{out: out, socket: sock, devRoot: root, node: node, devs: devs}
}

// command runs one of the built programs with the simulated driver's environment plus env.
func (e *cudaEnv) command(name string, env map[string]string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(e.out, name), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=" + e.out,
		"SIMGPU_SOCKET=" + e.socket, "SIMGPU_DEV_ROOT=" + e.devRoot}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

func (e *cudaEnv) probe(t *testing.T, env map[string]string, args ...string) probeResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := e.command("cudaprobe", env, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cudaprobe %v: %v\nstdout: %s\nstderr: %s", args, err, stdout.Bytes(), stderr.Bytes())
	}
	return decodeProbe(t, stdout.Bytes())
}

func decodeProbe(t *testing.T, b []byte) probeResult {
	t.Helper()
	var r probeResult
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("cudaprobe output is not JSON: %v\n%s", err, b)
	}
	return r
}

func (e *cudaEnv) uuids(indices ...int) []string {
	var out []string
	for _, i := range indices {
		out = append(out, fake.GPUUUID(e.node, i))
	}
	return out
}

func probeUUIDs(r probeResult) []string {
	var out []string
	for _, d := range r.Devices {
		out = append(out, d.UUID)
	}
	return out
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}

func TestCUDA(t *testing.T) {
	requireCUDATools(t)
	out := buildCUDA(t)

	t.Run("AllDevices", func(t *testing.T) {
		e := newCUDAEnv(t, out)
		r := e.probe(t, nil)
		if r.Error != "" || r.LibVGPU {
			t.Fatalf("error %q libvgpu %v", r.Error, r.LibVGPU)
		}
		if want := e.uuids(0, 1, 2, 3, 4, 5, 6, 7); !equalStrings(probeUUIDs(r), want) {
			t.Fatalf("uuids %v, want %v", probeUUIDs(r), want)
		}
		for i, d := range r.Devices {
			if d.Index != i || d.Name != e.devs[i].Name || d.TotalMiB != h100MiB ||
				d.FreeMiB != h100MiB || d.AllocMiB != 4096 || d.AllocError != "" {
				t.Errorf("device %d: %+v", i, d)
			}
		}
	})

	t.Run("VisibleDevices", func(t *testing.T) {
		e := newCUDAEnv(t, out)
		u3 := fake.GPUUUID(e.node, 3)
		cases := []struct {
			visible string
			want    []int
		}{
			{"1", []int{1}},
			{"5,2", []int{5, 2}},
			{u3, []int{3}},
			{u3[:12], []int{3}}, // a UUID prefix
			{"2,x,3", []int{2}}, // parsing stops at the first invalid entry
			{"2,99", []int{2}},
			{"1,1", []int{1}},
			{"4,,1", []int{4}},
			{" 6 ", []int{6}},
		}
		for _, c := range cases {
			r := e.probe(t, map[string]string{"CUDA_VISIBLE_DEVICES": c.visible}, "--max-mib", "256")
			if r.Error != "" || !equalStrings(probeUUIDs(r), e.uuids(c.want...)) {
				t.Errorf("CUDA_VISIBLE_DEVICES=%q: error %q uuids %v, want %v", c.visible, r.Error,
					probeUUIDs(r), e.uuids(c.want...))
			}
			if r.Env["CUDA_VISIBLE_DEVICES"] != c.visible {
				t.Errorf("env %v", r.Env)
			}
		}
		for _, v := range []string{"", "x", "GPU-ffffffff"} {
			r := e.probe(t, map[string]string{"CUDA_VISIBLE_DEVICES": v})
			if r.Error != "CUDA_ERROR_NO_DEVICE" || len(r.Devices) != 0 {
				t.Errorf("CUDA_VISIBLE_DEVICES=%q: %+v", v, r)
			}
		}
		for _, order := range []string{"PCI_BUS_ID", "FASTEST_FIRST"} {
			r := e.probe(t, map[string]string{"CUDA_DEVICE_ORDER": order}, "--max-mib", "0")
			if !equalStrings(probeUUIDs(r), e.uuids(0, 1, 2, 3, 4, 5, 6, 7)) {
				t.Errorf("CUDA_DEVICE_ORDER=%s: %v", order, probeUUIDs(r))
			}
		}
	})

	t.Run("DeviceNodes", func(t *testing.T) {
		e := newCUDAEnv(t, out)
		// index 0 has minor 7 (daemon.Minor): removing its node hides it.
		if err := os.Remove(filepath.Join(e.devRoot, "dev", fmt.Sprintf("nvidia%d", e.devs[0].Minor))); err != nil {
			t.Fatal(err)
		}
		r := e.probe(t, nil, "--max-mib", "0")
		if want := e.uuids(1, 2, 3, 4, 5, 6, 7); !equalStrings(probeUUIDs(r), want) {
			t.Fatalf("uuids %v, want %v", probeUUIDs(r), want)
		}
		// CUDA_VISIBLE_DEVICES indexes the devices the process has.
		r = e.probe(t, map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, "--max-mib", "0")
		if want := e.uuids(1); !equalStrings(probeUUIDs(r), want) {
			t.Fatalf("uuids %v, want %v", probeUUIDs(r), want)
		}
	})

	t.Run("NoDaemon", func(t *testing.T) {
		e := newCUDAEnv(t, out)
		e.socket = filepath.Join(t.TempDir(), "none")
		r := e.probe(t, nil)
		if r.Error != "CUDA_ERROR_NO_DEVICE" || len(r.Devices) != 0 {
			t.Fatalf("%+v", r)
		}
	})

	t.Run("OutOfMemory", func(t *testing.T) {
		e := newCUDAEnv(t, out)
		r := e.probe(t, map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, "--max-mib", "100000")
		if len(r.Devices) != 1 {
			t.Fatalf("%+v", r)
		}
		d := r.Devices[0]
		if d.AllocMiB != h100MiB || d.AllocError != "CUDA_ERROR_OUT_OF_MEMORY" || d.FreeMiB != h100MiB {
			t.Fatalf("%+v", d)
		}
	})

	t.Run("ConcurrentHold", func(t *testing.T) {
		e := newCUDAEnv(t, out)
		holder := e.command("cudaprobe", nil, "--max-mib", "0", "--hold-mib", "8192", "--hold-seconds", "30")
		var hout bytes.Buffer
		holder.Stdout = &hout
		stderr, err := holder.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
		ready := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "holding") {
					ready <- nil
					return
				}
			}
			ready <- errors.New("holder exited before holding")
		}()
		select {
		case err := <-ready:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("holder never held its memory")
		}
		r := e.probe(t, nil, "--max-mib", "1024")
		for _, d := range r.Devices {
			if d.FreeMiB != h100MiB-8192 || d.AllocMiB != 1024 {
				t.Errorf("while another process holds 8192 MiB: %+v", d)
			}
		}
		_ = holder.Process.Kill()
		_ = holder.Wait()
		// The daemon frees a dead process's memory when its connection closes.
		deadline := time.Now().Add(10 * time.Second)
		for {
			r = e.probe(t, map[string]string{"CUDA_VISIBLE_DEVICES": "0"}, "--max-mib", "0")
			if len(r.Devices) == 1 && r.Devices[0].FreeMiB == h100MiB {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("memory not freed after the holder died: %+v", r)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("APIEdgeCases", func(t *testing.T) {
		e := newCUDAEnv(t, out)
		b, err := e.command("cudatest", map[string]string{"CUDA_VISIBLE_DEVICES": "0"}).CombinedOutput()
		if err != nil {
			t.Fatalf("cudatest: %v\n%s", err, b)
		}
		if !bytes.Contains(b, []byte("ok free twice")) {
			t.Fatalf("cudatest output lacks its checks:\n%s", b)
		}
	})

	t.Run("Exports", func(t *testing.T) {
		f, err := elf.Open(filepath.Join(out, "libcuda.so.1"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		syms, err := f.DynamicSymbols()
		if err != nil {
			t.Fatal(err)
		}
		exported := map[string]bool{}
		for _, s := range syms {
			if s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) == elf.STB_LOCAL {
				continue
			}
			if !strings.HasPrefix(s.Name, "cu") {
				t.Errorf("libcuda exports %q: internal symbols must be static or hidden", s.Name)
			}
			exported[s.Name] = true
		}
		// What HAMi-core's libvgpu.so resolves with dlsym and cannot do without, plus the
		// per-thread-stream variants and a few stubs.
		for _, name := range []string{"cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet",
			"cuDeviceGetAttribute", "cuDeviceGetName", "cuDeviceGetUuid", "cuDeviceGetUuid_v2",
			"cuDeviceTotalMem_v2", "cuCtxGetDevice", "cuCtxCreate_v2", "cuCtxCreate_v3",
			"cuCtxDestroy_v2", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2",
			"cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuMemAllocManaged",
			"cuMemAllocPitch_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuLaunchKernel",
			"cuLaunchKernel_ptsz", "cuMemcpyAsync_ptsz", "cuGetProcAddress", "cuGetProcAddress_v2",
			"cuGetExportTable", "cuMemCreate", "cuMemMap", "cuGraphLaunch", "cuMemPoolCreate"} {
			if !exported[name] {
				t.Errorf("libcuda does not export %s", name)
			}
		}
		if len(exported) < 300 {
			t.Errorf("libcuda exports %d symbols, want the broad driver API (>= 300)", len(exported))
		}
	})

	t.Run("Flags", func(t *testing.T) {
		e := newCUDAEnv(t, out)
		for _, args := range [][]string{{"--max-mib"}, {"--max-mib", "x"}, {"--nope"}, {"--max-mib", "-1"}} {
			err := e.command("cudaprobe", nil, args...).Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Errorf("cudaprobe %v: %v, want exit 2", args, err)
			}
		}
		r := e.probe(t, map[string]string{"CUDA_DEVICE_MEMORY_LIMIT_3": "10g", "LD_PRELOAD": "a\"b"},
			"--max-mib=256", "--dlsym")
		if r.Env["CUDA_DEVICE_MEMORY_LIMIT_3"] != "10g" || r.Env["LD_PRELOAD"] != "a\"b" ||
			len(r.Devices) != 8 || r.Devices[0].AllocMiB != 256 {
			t.Fatalf("%+v", r)
		}
	})
}
