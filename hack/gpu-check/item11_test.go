package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 36 item 11: the shipped HAMi-core version, the preload file, two GPUs, the GLIBC floor.

const testUUID2 = "GPU-0b1c2d3e-4444-5555-6666-777788889999"

// probeDevicesJSON is isolation_probe.py's devices mode under HAMi-core with per-GPU limits.
const probeDevicesJSON = `{"mode": "devices", "env": {"HAMI_GO_GPU_UUIDS": "%UUID%,` + testUUID2 + `", "CUDA_VISIBLE_DEVICES": "0,1",
 "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "LD_PRELOAD": "", "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "5000m",
 "CUDA_DEVICE_SM_LIMIT_0": "30", "CUDA_DEVICE_SM_LIMIT_1": "30"},
 "libvgpu": ["/w/vgpu/libvgpu.so"], "preloadFile": "/w/vgpu/libvgpu.so", "deviceCount": 2, "devices": [
 {"device": 0, "name": "NVIDIA H200", "memGetInfoMiB": {"api": "torch.cuda.mem_get_info", "free": 3000, "total": 3000},
  "steps": [{"mib": 2000, "ok": true}, {"mib": 3100, "ok": false, "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 3.03 GiB."}]},
 {"device": 1, "name": "NVIDIA H200", "memGetInfoMiB": {"api": "torch.cuda.mem_get_info", "free": 5000, "total": 5000},
  "steps": [{"mib": 4000, "ok": true}, {"mib": 5100, "ok": false, "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 4.98 GiB."}]}]}`

// env2GPU is the host env of the two-GPU slice (what the client reported above).
func env2GPU() map[string]string {
	return map[string]string{"HAMI_GO_GPU_UUIDS": testUUID + "," + testUUID2, "CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
		"CUDA_DEVICE_MEMORY_LIMIT_0": "3000m", "CUDA_DEVICE_MEMORY_LIMIT_1": "5000m", "CUDA_DEVICE_SM_LIMIT_0": "30", "CUDA_DEVICE_SM_LIMIT_1": "30"}
}

// Each GPU's own limit: GPU 1's 4000 MiB fits its 5000 MiB limit but not GPU 0's 3000 MiB, so
// GPU 0's limit applied to both (HAMi-core#319) fails the check.
func TestEval2GPU(t *testing.T) {
	vals, rows := eval2GPU(parseProbe(t, probeDevicesJSON), env2GPU(), [2]string{testUUID, testUUID2})
	for _, v := range vals {
		if !v.OK {
			t.Errorf("%+v differs", v)
		}
	}
	if len(vals) != 18 || len(rows) != 2 || rows[0].LimitMiB != 3000 || rows[0].LargestOKMiB != 2000 || rows[0].FirstFailedMiB != 3100 ||
		rows[1].LimitMiB != 5000 || rows[1].LargestOKMiB != 4000 || rows[1].FirstFailedMiB != 5100 ||
		rows[1].MemoryView != "torch.cuda.mem_get_info: total 5000 MiB, free 5000 MiB (the limit's view)" {
		t.Fatalf("%d values, rows %+v", len(vals), rows)
	}
	// HAMi-core#319: both GPUs got GPU 0's 3000 MiB.
	p := parseProbe(t, probeDevicesJSON)
	p.Devices[1].Steps[0] = probeAlloc{MiB: 4000, OK: false, Error: "OutOfMemoryError: CUDA out of memory."}
	p.Devices[1].MemInfo = &memView{API: "torch.cuda.mem_get_info", Free: 3000, Total: 3000}
	vals, _ = eval2GPU(p, env2GPU(), [2]string{testUUID, testUUID2})
	var bad []string
	for _, v := range vals {
		if !v.OK {
			bad = append(bad, v.What)
		}
	}
	if strings.Join(bad, "|") != "GPU 1: allocate 4000 MiB within its 5000 MiB limit" {
		t.Fatalf("differing %q, want GPU 1's within-step only", bad)
	}
	// No enforcement on GPU 1, and the client saw one device only.
	p = parseProbe(t, probeDevicesJSON)
	p.Devices[1].Steps[1] = probeAlloc{MiB: 5100, OK: true}
	p.DeviceCount = 1
	p.Libvgpu = nil
	vals, _ = eval2GPU(p, env2GPU(), [2]string{testUUID, testUUID2})
	bad = nil
	for _, v := range vals {
		if !v.OK {
			bad = append(bad, v.What+"="+v.Got)
		}
	}
	if strings.Join(bad, "|") != "devices client: libvgpu.so mapped in the process (/proc/self/maps)=no|CUDA devices the client sees=1|GPU 1: allocate 5100 MiB past its 5000 MiB limit=succeeds" {
		t.Fatalf("differing %q", bad)
	}
}

// preloadHost fakes nvidia-smi (smi), PyTorch and unshare: the namespace's /etc/ld.so.preload
// reads lib, and every client (under unshare, env -i or neither) writes fixtures[label] to its
// --out file.
func preloadHost(lib string, smi string, fixtures map[string]string) *fakeHost {
	f := &fakeHost{path: map[string]bool{"unshare": true}, answers: map[string]fakeAnswer{
		"python3 -c": {stdout: "2.5.1 12.4 True"},
		"nvidia-smi --query-gpu=" + smiQueryFields: {stdout: smi},
		"unshare --mount":                          {stdout: lib + "\n"},
		"python3 isolation_probe.py":               {},
	}}
	f.onRunArgs = func(_ string, args, _ []string) {
		for i, a := range args {
			if a == "--out" && i+1 < len(args) {
				label := strings.TrimSuffix(filepath.Base(args[i+1]), ".json")
				if j, ok := fixtures[label]; ok {
					_ = os.WriteFile(args[i+1], []byte(strings.ReplaceAll(j, "%UUID%", testUUID)), 0o644)
				}
			}
		}
	}
	return f
}

const (
	smi1 = "0, " + testUUID + ", NVIDIA H200, 143771, 00000000:19:00.0, 9.0, 570.86.15\n"
	smi2 = smi1 + "1, " + testUUID2 + ", NVIDIA H200, 143771, 00000000:9A:00.0, 9.0, 570.86.15\n"
)

// The chart's path: the clients run in a private mount namespace whose /etc/ld.so.preload
// names the library, with no LD_PRELOAD; one more client runs under env -i.
func TestIsolationCheckPreloadFile(t *testing.T) {
	out, work := outDir(t), t.TempDir()
	hostPreload := filepath.Join(t.TempDir(), "ld.so.preload")
	_ = os.WriteFile(hostPreload, []byte("/usr/lib/libjemalloc.so.2\n"), 0o644)
	c := isoConfig{Python: "python3", Script: "isolation_probe.py", SMI: "nvidia-smi", WorkDir: work, SMSeconds: 30, RefSeconds: 10, HostPreload: hostPreload}
	built := filepath.Join(t.TempDir(), "libvgpu.so")
	_ = os.WriteFile(built, []byte("ELF"), 0o644)
	shipped := withVersion(hamiCoreBuild{Status: Pass, Library: built, Commit: "b216ba1be1b8e21488d1c7370ed3357b3049aad1"}, testInfo)
	writeBuild(t, out, shipped)
	dir := filepath.Join(work, "vgpu-isolation")
	lib := filepath.Join(dir, "libvgpu.so")
	noPreloadEnv := strings.ReplaceAll(probeStepsJSON, `"LD_PRELOAD": "/w/libvgpu.so"`, `"LD_PRELOAD": ""`)
	steps := strings.ReplaceAll(noPreloadEnv, "/w/steps.cache", filepath.Join(work, "steps.cache"))
	fixtures := map[string]string{"isolation-steps": steps, "isolation-shared": probeSharedJSON, "isolation-envi": noPreloadEnv,
		"isolation-ref": probeRefJSON, "isolation-limited": probeLimitedJSON}
	f := preloadHost(lib, smi1, fixtures)
	r := isolationCheck(context.Background(), f.host(), out, c)
	if r.Status != Pass || r.Reason != "" {
		t.Fatalf("isolation = %s (%s) %+v", r.Status, r.Reason, r.Values)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "ld.so.preload")); string(b) != lib+"\n" {
		t.Fatalf("preload file = %q, want the library", b)
	}
	if v, _ := valueByWhat(r.Values, preloadMechanism); !strings.HasPrefix(v.Got, "/etc/ld.so.preload: an overlay on /etc in a private mount namespace") {
		t.Fatalf("mechanism = %+v", v)
	}
	if v, _ := valueByWhat(r.Values, hostPreload+" unchanged by the namespace"); !v.OK || v.Want != `"/usr/lib/libjemalloc.so.2"` {
		t.Fatalf("host preload = %+v", v)
	}
	if v, _ := valueByWhat(r.Values, "HAMi-core version tested"); !strings.HasPrefix(v.Got, "HAMi-core: the shipped version: built here from b216ba1be1b8") {
		t.Fatalf("version = %+v", v)
	}
	// gpuenv mounted the preload file: no LD_PRELOAD in the container env nor the clients'.
	if got := readRaw(out, "isolation.env"); strings.Contains(got, "LD_PRELOAD") {
		t.Fatalf("raw/isolation.env has LD_PRELOAD:\n%s", got)
	}
	var wrapped, envI, bare int
	for _, a := range f.args {
		cmd := strings.Join(a, " ")
		switch {
		case a[0] == "unshare" && strings.Contains(cmd, " env -i "):
			envI++
			want := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", preloadScript, "sh", filepath.Join(dir, "ns"), filepath.Join(dir, "ld.so.preload"), "env", "-i"}
			if len(a) < len(want) || strings.Join(a[:len(want)], "\x00") != strings.Join(want, "\x00") {
				t.Errorf("env -i client = %q", a)
			}
			for _, w := range []string{" CUDA_DEVICE_MEMORY_LIMIT_0=4000m ", " CUDA_DEVICE_SM_LIMIT_0=30 ", " CUDA_VISIBLE_DEVICES=0 ",
				" CUDA_DEVICE_MEMORY_SHARED_CACHE=" + filepath.Join(work, "envi.cache") + " ", " HOME=", " PATH="} {
				if !strings.Contains(cmd, w) {
					t.Errorf("env -i client lacks %q: %s", w, cmd)
				}
			}
			if strings.Contains(cmd, "LD_PRELOAD") || strings.Contains(cmd, "HAMI_GO_GPU_UUIDS") {
				t.Errorf("env -i client keeps more than PATH, HOME and the limits: %s", cmd)
			}
		case a[0] == "unshare" && strings.Contains(cmd, "isolation_probe.py"):
			wrapped++
		case a[0] == "python3" && strings.Contains(cmd, "isolation_probe.py"):
			bare++
		}
	}
	if wrapped != 3 || envI != 1 || bare != 1 {
		t.Fatalf("clients: %d in the namespace, %d under env -i, %d bare (the unlimited reference); want 3, 1, 1: %q", wrapped, envI, bare, f.args)
	}
	for k, env := range f.envs {
		if strings.Contains(strings.Join(env, " "), "LD_PRELOAD") {
			t.Errorf("%s ran with LD_PRELOAD: %q", k, env)
		}
	}
	// The env -i client without HAMi-core mapped (the preload did not load): the check fails.
	fixtures["isolation-envi"] = strings.ReplaceAll(noPreloadEnv, `"libvgpu": ["/w/libvgpu.so"], `, "")
	out2 := outDir(t)
	writeBuild(t, out2, shipped)
	r = isolationCheck(context.Background(), preloadHost(lib, smi1, fixtures).host(), out2, c)
	if v, _ := valueByWhat(r.Values, "env -i client (PATH, HOME and the limits only): libvgpu.so mapped in the process (/proc/self/maps)"); r.Status != Fail || v.OK || v.Got != "no" {
		t.Fatalf("env -i client without libvgpu.so: %s (%s) %+v", r.Status, r.Reason, v)
	}
	// A namespace that cannot be made (not root): LD_PRELOAD, said.
	f = preloadHost(lib, smi1, fixtures)
	f.answers["unshare --mount"] = fakeAnswer{stderr: "unshare: unshare failed: Operation not permitted", err: os.ErrPermission}
	vdir := filepath.Join(t.TempDir(), "v")
	_, pre, vals, err := setupPreload(context.Background(), f.host(), out, "isolation", vdir, built, hostPreload)
	if err != nil || pre.File != "" || !strings.Contains(vals[0].Got, "LD_PRELOAD (fallback: no private mount namespace with an overlay on /etc here (needs root and overlayfs)") ||
		!strings.Contains(vals[0].Got, "Operation not permitted") || !vals[1].OK {
		t.Fatalf("not root: %+v %v %+v", pre, err, vals)
	}
	if _, err := os.Stat(filepath.Join(vdir, "ld.so.preload")); err == nil {
		t.Fatal("the preload file stayed: gpuenv would mount it")
	}
}

// The namespace for real where this machine allows it (root, unshare, overlayfs): a library
// built here is mapped into isolation_probe.py (over the fake PyTorch) run under env -i, through
// /etc/ld.so.preload only, and the host's /etc/ld.so.preload is left as it was.
func TestPreloadNamespaceReal(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	py, perr := exec.LookPath("python3")
	if os.Geteuid() != 0 || err != nil || perr != nil {
		t.Skip("needs root, gcc and python3")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "empty.c")
	_ = os.WriteFile(src, []byte("int hami_go_gpu_check_marker;\n"), 0o644)
	built := filepath.Join(dir, "built.so")
	if b, err := exec.Command(gcc, "-shared", "-fPIC", "-o", built, src).CombinedOutput(); err != nil {
		t.Skipf("gcc: %v %s", err, b)
	}
	before, berr := os.ReadFile("/etc/ld.so.preload")
	out := outDir(t)
	h := realHost()
	lib, pre, vals, err := setupPreload(context.Background(), h, out, "isolation", filepath.Join(dir, "vgpu"), built, "/etc/ld.so.preload")
	if err != nil {
		t.Fatal(err)
	}
	if pre.File == "" {
		t.Skipf("no private mount namespace here: %s", pre.Why)
	}
	for _, v := range vals {
		if !v.OK {
			t.Errorf("%+v", v)
		}
	}
	torch := filepath.Join(dir, "torch")
	_ = os.MkdirAll(torch, 0o755)
	_ = os.WriteFile(filepath.Join(torch, "__init__.py"), []byte(fakeTorch), 0o644)
	res := filepath.Join(dir, "envi.json")
	args := []string{"-i", "PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + dir, "FAKE_TORCH_LIMIT_MIB=4000", "FAKE_TORCH_STATE=" + filepath.Join(dir, "state"),
		py, "isolation_probe.py", "--out", res, "--mode", "steps", "--steps", isoSteps}
	name, a := pre.wrap("env", args)
	if o, e, err := h.run(context.Background(), nil, name, a...); err != nil {
		t.Fatalf("%v\n%s%s", err, o, e)
	}
	p := readProbe(res, "")
	if v := mappedValue("env -i", p); !v.OK || v.Got != "yes: "+lib || p.PreloadFile != lib || p.Env["LD_PRELOAD"] != "" {
		t.Fatalf("env -i client: %+v, preload file %q, env %v", v, p.PreloadFile, p.Env)
	}
	after, aerr := os.ReadFile("/etc/ld.so.preload")
	if describeFile(before, berr) != describeFile(after, aerr) {
		t.Fatalf("the host's /etc/ld.so.preload changed: %s -> %s", describeFile(before, berr), describeFile(after, aerr))
	}
}

func TestIsolation2GPUCheck(t *testing.T) {
	out, work := outDir(t), t.TempDir()
	c := isoConfig{Python: "python3", Script: "isolation_probe.py", SMI: "nvidia-smi", WorkDir: work, HostPreload: filepath.Join(t.TempDir(), "none")}
	built := filepath.Join(t.TempDir(), "libvgpu.so")
	_ = os.WriteFile(built, []byte("ELF"), 0o644)
	writeBuild(t, out, withVersion(hamiCoreBuild{Status: Pass, Library: built, Commit: "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811"}, testInfo))
	lib := filepath.Join(work, "vgpu-isolation-2gpu", "libvgpu.so")
	// One GPU: skipped with the reason.
	if r := isolation2GPUCheck(context.Background(), preloadHost(lib, smi1, nil).host(), out, c); r.Status != Skip || r.Reason != "needs two GPUs: nvidia-smi lists 1 here" {
		t.Fatalf("one GPU: %s (%s)", r.Status, r.Reason)
	}
	f := preloadHost(lib, smi2, map[string]string{"isolation-2gpu-devices": probeDevicesJSON})
	r := isolation2GPUCheck(context.Background(), f.host(), out, c)
	if r.Status != Pass || len(r.IsolationGPUs) != 2 || r.IsolationGPUs[1].Check != "isolation-2gpu GPU 1" ||
		!strings.HasPrefix(r.Reason, "limits hold for this build only: HAMi-core: NOT the shipped version") {
		t.Fatalf("isolation-2gpu = %s (%s) %+v", r.Status, r.Reason, r.Values)
	}
	host := readRaw(out, "isolation-2gpu-host.env")
	for _, w := range []string{"CUDA_VISIBLE_DEVICES=0,1\n", "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n", "CUDA_DEVICE_MEMORY_LIMIT_1=5000m\n",
		"CUDA_DEVICE_SM_LIMIT_0=30\n", "CUDA_DEVICE_SM_LIMIT_1=30\n", "HAMI_GO_GPU_UUIDS=" + testUUID + "," + testUUID2 + "\n"} {
		if !strings.Contains(host+"\n", w) {
			t.Errorf("raw/isolation-2gpu-host.env lacks %q:\n%s", w, host)
		}
	}
	var client []string
	for _, a := range f.args {
		if strings.Contains(strings.Join(a, " "), "--mode devices") {
			client = a
		}
	}
	if len(client) == 0 || client[0] != "unshare" || client[len(client)-1] != "0:2000,3100;1:4000,5100" {
		t.Fatalf("devices client = %q", client)
	}
}

// The GLIBC floor: the library's newest GLIBC_x.y against the oldest supported image glibc.
func TestHAMiCoreGLIBCCheck(t *testing.T) {
	bin := dynamicELF(t)
	need, _, _ := requiredGLIBC([]string{bin})
	out := outDir(t)
	if r := hamiCoreGLIBCCheck(context.Background(), glibcHost("2.35").host(), out, "2.28"); r.Status != Fail || !strings.Contains(r.Reason, "no HAMi-core build result") {
		t.Fatalf("no build: %s (%s)", r.Status, r.Reason)
	}
	writeBuild(t, out, hamiCoreBuild{Status: Skip, Reason: "cmake not found in PATH: cannot build HAMi-core"})
	if r := hamiCoreGLIBCCheck(context.Background(), glibcHost("2.35").host(), out, "2.28"); r.Status != Skip || r.Reason != "HAMi-core build: cmake not found in PATH: cannot build HAMi-core" {
		t.Fatalf("build skipped: %s (%s)", r.Status, r.Reason)
	}
	// A source build says nothing of the shipped library: above the floor it is reported, naming
	// the build machine's glibc, and does not fail the run.
	writeBuild(t, out, withVersion(hamiCoreBuild{Status: Pass, Library: bin, Commit: "8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811"}, testInfo))
	r := hamiCoreGLIBCCheck(context.Background(), glibcHost("2.35").host(), out, "2.0")
	if v := r.Values[0]; r.Status != Pass || v.Got != need || v.Want != "report-only for a library built on this machine" ||
		v.Note != "built on this machine (glibc 2.35): the requirement follows the build machine's glibc, not the shipped library's (stage that with HAMI_GO_HAMI_CORE_LIB); report-only, within the floor: false" {
		t.Fatalf("source build, floor 2.0: %s (%s) %+v", r.Status, r.Reason, r.Values)
	}
	// The prebuilt (shipped) library above the floor fails, naming both.
	writeBuild(t, out, withVersion(hamiCoreBuild{Status: Pass, Library: bin, Prebuilt: true, SHA256: "0123456789abcdef0123"}, testInfo))
	r = hamiCoreGLIBCCheck(context.Background(), glibcHost("2.35").host(), out, "2.0")
	if r.Status != Fail || r.Reason != "libvgpu.so needs GLIBC_"+need+", newer than glibc 2.0 of the oldest supported image: it would not load there (the staged prebuilt library (0123456789ab), as shipped)" {
		t.Fatalf("prebuilt, floor 2.0: %s (%s)", r.Status, r.Reason)
	}
	if v := r.Values[0]; v.Got != need || v.Want != "<= 2.0 (the oldest image glibc supported: RHEL 8 / UBI 8, docs/runtimes.md)" {
		t.Fatalf("value = %+v", v)
	}
	// The prebuilt (shipped) library within the floor passes.
	writeBuild(t, out, withVersion(hamiCoreBuild{Status: Pass, Library: bin, Prebuilt: true, SHA256: "0123456789abcdef0123"}, testInfo))
	r = hamiCoreGLIBCCheck(context.Background(), glibcHost("2.35").host(), out, need)
	if r.Status != Pass || r.Values[0].Note != "the staged prebuilt library (0123456789ab), as shipped" ||
		!strings.HasPrefix(r.Values[1].Got, "HAMi-core: prebuilt libvgpu.so sha256 0123456789ab, staged as the shipped library") {
		t.Fatalf("prebuilt at the floor: %s (%s) %+v", r.Status, r.Reason, r.Values)
	}
	doc, err := os.ReadFile("../../docs/runtimes.md")
	if err != nil || imageGLIBCFloor != "2.28" || !strings.Contains(string(doc), "glibc "+imageGLIBCFloor) {
		t.Fatalf("docs/runtimes.md does not state the floor glibc %s (%v)", imageGLIBCFloor, err)
	}
}

// The prebuilt library is used instead of a build, with its sha256; the version line says
// which HAMi-core the chart ships.
func TestBuildHAMiCorePrebuilt(t *testing.T) {
	out := outDir(t)
	stage := t.TempDir()
	lib := filepath.Join(stage, "hami-core-lib", "libvgpu.so")
	_ = os.MkdirAll(filepath.Dir(lib), 0o755)
	_ = os.WriteFile(lib, []byte("shipped libvgpu"), 0o644)
	sum, _ := fileSHA256(lib)
	info := filepath.Join(stage, hamiCoreInfoFile)
	_ = os.WriteFile(info, []byte("HAMI_CORE_SHIPPED_COMMIT=b216ba1be1b8e21488d1c7370ed3357b3049aad1\nHAMI_CORE_SHIPPED_IMAGE=docker.io/projecthami/hamicore:v2.10.0\n"+
		"HAMI_CORE_STAGED_COMMIT=\nHAMI_CORE_STAGED_FROM=/x/libvgpu.so.v2.10.0\nHAMI_CORE_PREBUILT_SHA256="+sum+"\n"), 0o644)
	c := hamiCoreConfig{Src: filepath.Join(stage, "hami-core-src"), BuildDir: t.TempDir(), CMake: "cmake", NVCC: "nvcc", Info: info, Prebuilt: lib}
	b := buildHAMiCore(context.Background(), (&fakeHost{}).host(), out, c)
	if b.Status != Pass || !b.Prebuilt || !b.Shipped || b.Library != lib || b.SHA256 != sum || b.ShippedCommit != "b216ba1be1b8e21488d1c7370ed3357b3049aad1" ||
		b.Version != "HAMi-core: prebuilt libvgpu.so sha256 "+sum[:12]+", staged as the shipped library (the chart's docker.io/projecthami/hamicore:v2.10.0 = HAMi-core b216ba1be1b8; its commit is not verified here)" {
		t.Fatalf("prebuilt = %+v", b)
	}
	// A library that changed after staging fails.
	_ = os.WriteFile(lib, []byte("another"), 0o644)
	if b := buildHAMiCore(context.Background(), (&fakeHost{}).host(), out, c); b.Status != Fail || !strings.Contains(b.Reason, "build.sh staged "+sum) {
		t.Fatalf("changed prebuilt = %+v", b)
	}
	// The source of another commit: not the shipped version (known before building).
	c.Prebuilt, c.Src = filepath.Join(stage, "none"), fakeSrc(t)
	b = buildHAMiCore(context.Background(), (&fakeHost{}).host(), out, c)
	if b.Shipped || !strings.HasPrefix(b.Version, "HAMi-core: NOT the shipped version: built here from 8f3a89c67b03, but the chart's docker.io/projecthami/hamicore:v2.10.0 = HAMi-core b216ba1be1b8") {
		t.Fatalf("source of 8f3a89c = %+v", b)
	}
	j, _ := json.Marshal(b)
	if !strings.Contains(string(j), `"shippedCommit":"b216ba1be1b8e21488d1c7370ed3357b3049aad1"`) {
		t.Fatalf("json = %s", j)
	}
	if !sameCommit("b216ba1", "b216ba1be1b8e21488d1c7370ed3357b3049aad1") || sameCommit("b216ba", "b216ba1be1b8") || sameCommit("8f3a89c", "b216ba1") {
		t.Fatal("sameCommit")
	}
}
