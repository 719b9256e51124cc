// Command gpucheck is the comparing and summarizing half of hami-go's real-GPU check
// (hack/gpu-check/README.md): run.sh calls it once per check on the GPU machine. It is built
// static (CGO_ENABLED=0); the binaries that need NVML are nvml-probe, deviceplugin.test and dra.test.
//
//	gpucheck preflight     --out DIR   # nvidia-smi present and lists a GPU; glibc new enough
//	gpucheck discovery     --out DIR   # pkg/nvml (nvml-probe) vs nvidia-smi and sysfs
//	gpucheck device-plugin --out DIR --mps-pipe-dir P   # TestGPUCheckNVML from deviceplugin.test
//	gpucheck dra-driver    --out DIR   # TestGPUCheckDRA from dra.test vs nvidia-smi and sysfs
//	gpucheck hami-core-build --out DIR --hami-core-src S --work-dir W   # libvgpu.so for isolation (or the staged prebuilt one)
//	gpucheck hami-core-glibc --out DIR                  # libvgpu.so's newest GLIBC_x.y vs the oldest supported image glibc
//	gpucheck isolation     --out DIR --work-dir W       # HAMi-core limits with pkg/gpuenv's env, via /etc/ld.so.preload
//	gpucheck isolation-2gpu --out DIR --work-dir W      # per-GPU HAMi-core limits in one process on two GPUs
//	gpucheck mps           --out DIR --mps-pipe-dir P   # MPS limits from the Allocate env
//	gpucheck isolation-mps --out DIR --mps-pipe-dir P   # MPS limits with pkg/gpuenv's env
//	gpucheck slice-env     --out DIR --uuid U [--enforcement E --library L]   # prints the env
//	gpucheck skip          --out DIR --name N --reason R
//	gpucheck summary       --out DIR   # summary.json + summary.txt; prints summary.txt
//
// Exit status: preflight 0 (ready), 10 (no GPU: every check recorded as skipped), 11 (the cgo
// binaries cannot run, e.g. glibc too old: the NVML checks recorded as skipped); summary 1 when a
// check failed; 2 on bad usage.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
)

// Exit codes of preflight.
const (
	exitNoGPU       = 10
	exitCGOUnusable = 11
	exitUsage       = 2
)

func main() {
	exe, _ := os.Executable()
	os.Exit(run(context.Background(), os.Args[1:], realHost(), filepath.Dir(exe), os.Stdout, os.Stderr))
}

// realHost runs commands through os/exec.
func realHost() host {
	return host{
		lookPath: exec.LookPath,
		run: func(ctx context.Context, env []string, name string, args ...string) ([]byte, []byte, error) {
			var o, e bytes.Buffer
			cmd := exec.CommandContext(ctx, name, args...)
			cmd.Env = append(os.Environ(), env...)
			cmd.Stdout, cmd.Stderr = &o, &e
			// A daemon child (nvidia-cuda-mps-control -d) may keep the pipes open: stop waiting.
			cmd.WaitDelay = 3 * time.Second
			err := cmd.Run()
			if errors.Is(err, exec.ErrWaitDelay) {
				err = nil
			}
			if err != nil && ctx.Err() != nil {
				err = fmt.Errorf("%w (%v)", ctx.Err(), err)
			}
			return o.Bytes(), e.Bytes(), err
		},
	}
}

// run executes one subcommand; binDir is where the staged binaries lie (the stage's bin/).
func run(ctx context.Context, args []string, h host, binDir string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: gpucheck preflight|discovery|device-plugin|dra-driver|hami-core-build|hami-core-glibc|isolation|isolation-2gpu|mps|isolation-mps|slice-env|skip|summary --out DIR [flags]")
		return exitUsage
	}
	cmd := args[0]
	fs := pflag.NewFlagSet("gpucheck "+cmd, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "output folder (results/, raw/, summary.*)")
	smi := fs.String("nvidia-smi", "nvidia-smi", "the nvidia-smi command")
	pipe := fs.String("mps-pipe-dir", "", "private MPS pipe directory (device-plugin, mps)")
	probe := fs.String("nvml-probe", filepath.Join(binDir, "nvml-probe"), "the nvml-probe binary (discovery)")
	testBin := fs.String("test-binary", filepath.Join(binDir, "deviceplugin.test"), "pkg/deviceplugin's test binary (device-plugin)")
	draBin := fs.String("dra-test-binary", filepath.Join(binDir, "dra.test"), "pkg/dra's test binary (dra-driver)")
	sysfs := fs.String("sysfs-pci-dir", "/sys/bus/pci/devices", "sysfs PCI device folder (discovery, dra-driver: NUMA nodes)")
	control := fs.String("mps-control", "nvidia-cuda-mps-control", "the MPS control command (mps)")
	python := fs.String("python", "python3", "python3 with PyTorch (mps)")
	script := fs.String("mps-script", filepath.Join(binDir, "..", "mps_check.py"), "mps_check.py (mps)")
	hcSrc := fs.String("hami-core-src", filepath.Join(binDir, "..", "hami-core-src"), "staged HAMi-core source (hami-core-build)")
	hcInfo := fs.String("hami-core-info", filepath.Join(binDir, "..", hamiCoreInfoFile), "build.sh's record of the shipped and staged HAMi-core (hami-core-build)")
	hcLib := fs.String("hami-core-lib", filepath.Join(binDir, "..", "hami-core-lib", "libvgpu.so"), "staged prebuilt libvgpu.so, used instead of building when present (hami-core-build)")
	hostPreload := fs.String("host-preload", "/etc/ld.so.preload", "the host's preload file the isolation namespaces must leave unchanged (isolation, isolation-2gpu)")
	glibcFloor := fs.String("glibc-floor", imageGLIBCFloor, "the oldest image glibc supported (hami-core-glibc)")
	procGPUs := fs.String("proc-gpus-dir", "/proc/driver/nvidia/gpus", "the driver's per-GPU folders (discovery: minor numbers)")
	devDir := fs.String("dev-dir", "/dev", "device node folder (discovery: /dev/nvidia<minor>)")
	work := fs.String("work-dir", "", "private work folder: HAMi-core build, cache files (hami-core-build, isolation)")
	cmake := fs.String("cmake", "cmake", "the cmake command (hami-core-build)")
	nvcc := fs.String("nvcc", "nvcc", "the nvcc command, which locates the CUDA toolkit (hami-core-build)")
	isoScript := fs.String("probe-script", filepath.Join(binDir, "..", "isolation_probe.py"), "isolation_probe.py (isolation, isolation-mps)")
	smSeconds := fs.Float64("sm-seconds", 30, "how long the rate client runs under the compute limit (isolation, isolation-mps)")
	refSeconds := fs.Float64("ref-seconds", 10, "how long the unlimited rate client runs (isolation, isolation-mps)")
	uuid := fs.String("uuid", "", "GPU UUID (slice-env)")
	enforcement := fs.String("enforcement", "hami-core", "hami-core or mps (slice-env)")
	library := fs.String("library", "", "host path of libvgpu.so (slice-env)")
	name := fs.String("name", "", "check name (skip)")
	reason := fs.String("reason", "", "why the check is skipped (skip)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if *out == "" {
		fmt.Fprintf(stderr, "gpucheck %s: --out is required\n", cmd)
		return exitUsage
	}
	if err := os.MkdirAll(rawDir(*out), 0o755); err != nil {
		fmt.Fprintf(stderr, "gpucheck %s: %v\n", cmd, err)
		return exitUsage
	}
	record := func(r Result) int {
		r.Raw = existingRaw(*out, r.Raw)
		if err := writeResult(*out, r); err != nil {
			fmt.Fprintf(stderr, "gpucheck %s: %v\n", cmd, err)
			return exitUsage
		}
		fmt.Fprintf(stdout, "%s: %s %s\n", r.Name, r.Status, r.Reason)
		return 0
	}
	switch cmd {
	case "preflight":
		r, st := preflight(ctx, h, *out, *smi, []string{*probe, *testBin, *draBin})
		if rc := record(r); rc != 0 {
			return rc
		}
		switch st {
		case noGPU:
			if err := skipAll(*out, r.Reason); err != nil {
				fmt.Fprintln(stderr, "gpucheck preflight:", err)
			}
			return exitNoGPU
		case cgoUnusable:
			for _, n := range []string{"discovery", "device-plugin", "dra-driver", "mps"} {
				_ = writeResult(*out, Result{Name: n, Status: Skip, Reason: "needs NVML through the cgo binaries; " + r.Reason})
			}
			return exitCGOUnusable
		}
		return 0
	case "discovery":
		return record(discovery(ctx, h, *out, *smi, *probe, discoveryDirs{SysfsPCI: *sysfs, ProcGPUs: *procGPUs, Dev: *devDir}))
	case "device-plugin":
		if *pipe == "" {
			fmt.Fprintln(stderr, "gpucheck device-plugin: --mps-pipe-dir is required")
			return exitUsage
		}
		return record(pluginCheck(ctx, h, *out, *testBin, *pipe))
	case "dra-driver":
		return record(draCheck(ctx, h, *out, *smi, *draBin, *sysfs))
	case "mps":
		if *pipe == "" {
			fmt.Fprintln(stderr, "gpucheck mps: --mps-pipe-dir is required")
			return exitUsage
		}
		return record(mpsCheck(ctx, h, *out, mpsConfig{Control: *control, Python: *python, Script: *script, SMI: *smi, PipeDir: *pipe}))
	case "hami-core-build":
		if *work == "" {
			fmt.Fprintln(stderr, "gpucheck hami-core-build: --work-dir is required")
			return exitUsage
		}
		b := buildHAMiCore(ctx, h, *out, hamiCoreConfig{Src: *hcSrc, BuildDir: *work, CMake: *cmake, NVCC: *nvcc, CUDAHome: os.Getenv("CUDA_HOME"),
			Info: *hcInfo, Prebuilt: *hcLib})
		fmt.Fprintf(stdout, "hami-core-build: %s %s%s\n%s\n", b.Status, b.Library, b.Reason, b.Version)
		return 0
	case "hami-core-glibc":
		return record(hamiCoreGLIBCCheck(ctx, h, *out, *glibcFloor))
	case "isolation", "isolation-2gpu", "isolation-mps":
		if *work == "" || (cmd == "isolation-mps" && *pipe == "") {
			fmt.Fprintf(stderr, "gpucheck %s: --work-dir (and for isolation-mps --mps-pipe-dir) is required\n", cmd)
			return exitUsage
		}
		c := isoConfig{Python: *python, Script: *isoScript, SMI: *smi, WorkDir: *work, SMSeconds: *smSeconds, RefSeconds: *refSeconds,
			MPS: mpsConfig{Control: *control, Python: *python, SMI: *smi, PipeDir: *pipe}, HostPreload: *hostPreload}
		switch cmd {
		case "isolation":
			return record(isolationCheck(ctx, h, *out, c))
		case "isolation-2gpu":
			return record(isolation2GPUCheck(ctx, h, *out, c))
		}
		return record(isolationMPSCheck(ctx, h, *out, c))
	case "slice-env":
		if *uuid == "" {
			fmt.Fprintln(stderr, "gpucheck slice-env: --uuid is required")
			return exitUsage
		}
		e := sliceEnv(sliceSpec{Enforcement: *enforcement, UUID: *uuid, Library: *library, MPSPipeDir: *pipe}, fileExists)
		fmt.Fprint(stdout, envLines(e.Env))
		return 0
	case "skip":
		if *reason == "" {
			fmt.Fprintln(stderr, "gpucheck skip: --reason is required")
			return exitUsage
		}
		return record(Result{Name: *name, Status: Skip, Reason: *reason})
	case "summary":
		hostname, _ := os.Hostname()
		build, _ := os.ReadFile(filepath.Join(binDir, "..", "BUILD.txt"))
		s, err := summarize(*out, time.Now(), hostname, string(build))
		if err == nil {
			err = writeSummary(*out, s)
		}
		if err != nil {
			fmt.Fprintln(stderr, "gpucheck summary:", err)
			return exitUsage
		}
		fmt.Fprint(stdout, s.text())
		if s.Overall == Fail {
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "gpucheck: unknown command %q (preflight, discovery, device-plugin, dra-driver, hami-core-build, hami-core-glibc, isolation, isolation-2gpu, mps, isolation-mps, slice-env, skip, summary)\n", cmd)
	return exitUsage
}
