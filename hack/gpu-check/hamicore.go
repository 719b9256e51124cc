package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// hamiCoreBuildTimeout bounds HAMi-core's configure and build together.
const hamiCoreBuildTimeout = 120 * time.Second

// hamiCoreCommitFile, in the staged source, names the HAMi-core commit build.sh exported.
const hamiCoreCommitFile = ".hami-core-commit"

// hamiCoreBuild is raw/hami-core-build.json: the outcome of building libvgpu.so on this machine.
type hamiCoreBuild struct {
	// Status is pass (Library built), fail (the build failed: Reason has the log's tail) or skip
	// (no source, cmake or nvcc: Reason says which).
	Status Status `json:"status"`
	// Reason says why the build failed or was skipped.
	Reason string `json:"reason,omitempty"`
	// Library is the built libvgpu.so.
	Library string `json:"library,omitempty"`
	// Commit is the HAMi-core commit of the staged source.
	Commit string `json:"commit,omitempty"`
	// CUDAHome is the CUDA toolkit the build used; Stubs the folder of its libcuda.so stub.
	CUDAHome string `json:"cudaHome,omitempty"`
	Stubs    string `json:"stubs,omitempty"`
	// Seconds is how long configure and build took.
	Seconds float64 `json:"seconds,omitempty"`
}

// hamiCoreConfig names what the build uses.
type hamiCoreConfig struct {
	// Src is the staged HAMi-core source; BuildDir a private folder the build may fill.
	Src, BuildDir string
	// CMake and NVCC are the commands (looked up in PATH; NVCC also under CUDAHome/bin).
	CMake, NVCC string
	// CUDAHome is $CUDA_HOME ("" = from nvcc's location, else /usr/local/cuda).
	CUDAHome string
}

// cudaHome finds the CUDA toolkit: c.CUDAHome, else the folder above nvcc's bin/, else
// /usr/local/cuda; nvcc is c.NVCC from PATH or <home>/bin/nvcc.
func cudaHome(h host, c hamiCoreConfig) (home, nvcc string, err error) {
	if p, err := h.lookPath(c.NVCC); err == nil {
		nvcc = p
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		home = filepath.Dir(filepath.Dir(p))
	}
	if c.CUDAHome != "" {
		home = c.CUDAHome
	}
	if home == "" {
		home = "/usr/local/cuda"
	}
	if nvcc == "" {
		if _, err := os.Stat(filepath.Join(home, "bin", "nvcc")); err != nil {
			return "", "", fmt.Errorf("%s not found in PATH nor in %s/bin: no CUDA toolkit to build HAMi-core with", c.NVCC, home)
		}
		nvcc = filepath.Join(home, "bin", "nvcc")
	}
	return home, nvcc, nil
}

// findStubs returns the folder of the CUDA toolkit's libcuda.so link stub (lib64/stubs, or
// targets/<arch>/lib/stubs): the driver installs libcuda.so.1 only, and libvgpu.so links
// against -lcuda and -lnvidia-ml.
func findStubs(home string) (string, error) {
	cands := []string{filepath.Join(home, "lib64", "stubs")}
	if m, _ := filepath.Glob(filepath.Join(home, "targets", "*", "lib", "stubs")); m != nil {
		cands = append(cands, m...)
	}
	for _, d := range cands {
		if _, err := os.Stat(filepath.Join(d, "libcuda.so")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no libcuda.so stub in %s: cannot link libvgpu.so", strings.Join(cands, ", "))
}

// copyTree copies the regular files and folders of src into dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}

// dropTestSubdir removes add_subdirectory(test) from HAMi-core's top CMakeLists.txt: its tests
// use FindCUDA (gone from new CMake releases) and are not needed; only libvgpu.so is built.
func dropTestSubdir(cmakeLists string) (string, bool) {
	var keep []string
	dropped := false
	for _, l := range strings.Split(cmakeLists, "\n") {
		if strings.ReplaceAll(strings.TrimSpace(l), " ", "") == "add_subdirectory(test)" {
			dropped = true
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n"), dropped
}

// hamiCoreCMakeArgs are the configure arguments: HAMi-core's own build.sh options (its hooks
// and the multi-process limit; Debug as its build.sh and Dockerfile build it), CMake 4's policy
// floor, and the stub folder to link against.
func hamiCoreCMakeArgs(src, build, stubs string) []string {
	return []string{"-S", src, "-B", build,
		"-DCMAKE_POLICY_VERSION_MINIMUM=3.5",
		"-DCMAKE_BUILD_TYPE=Debug",
		"-DDLSYM_HOOK_ENABLE=1", "-DMULTIPROCESS_LIMIT_ENABLE=1", "-DHOOK_MEMINFO_ENABLE=1", "-DHOOK_NVML_ENABLE=1",
		"-DCMAKE_SHARED_LINKER_FLAGS=-L" + stubs,
	}
}

// buildHAMiCore builds libvgpu.so from c.Src into c.BuildDir within hamiCoreBuildTimeout and
// writes raw/hami-core-build.json and raw/hami-core-build.log.
func buildHAMiCore(ctx context.Context, h host, out string, c hamiCoreConfig) hamiCoreBuild {
	var log strings.Builder
	res := func(b hamiCoreBuild) hamiCoreBuild {
		_ = os.MkdirAll(rawDir(out), 0o755)
		_ = os.WriteFile(filepath.Join(rawDir(out), "hami-core-build.log"), []byte(log.String()), 0o644)
		j, _ := json.MarshalIndent(b, "", "  ")
		_ = os.WriteFile(filepath.Join(rawDir(out), "hami-core-build.json"), append(j, '\n'), 0o644)
		return b
	}
	commit, err := os.ReadFile(filepath.Join(c.Src, hamiCoreCommitFile))
	if _, serr := os.Stat(filepath.Join(c.Src, "CMakeLists.txt")); serr != nil {
		return res(hamiCoreBuild{Status: Skip, Reason: fmt.Sprintf("no HAMi-core source in the stage (%s): build.sh found no snapshot (set HAMI_GO_HAMI_CORE_SRC)", c.Src)})
	}
	b := hamiCoreBuild{Commit: strings.TrimSpace(string(commit))}
	if err != nil {
		b.Commit = "unknown"
	}
	if _, err := h.lookPath(c.CMake); err != nil {
		b.Status, b.Reason = Skip, c.CMake+" not found in PATH: cannot build HAMi-core"
		return res(b)
	}
	home, nvcc, err := cudaHome(h, c)
	if err != nil {
		b.Status, b.Reason = Skip, err.Error()
		return res(b)
	}
	b.CUDAHome = home
	if b.Stubs, err = findStubs(home); err != nil {
		b.Status, b.Reason = Fail, err.Error()
		return res(b)
	}
	fail := func(what string, err error) hamiCoreBuild {
		b.Status, b.Reason = Fail, fmt.Sprintf("HAMi-core %s failed: %v; log tail: %s", what, err, tail(log.String(), 8))
		return res(b)
	}
	src := filepath.Join(c.BuildDir, "src")
	build := filepath.Join(c.BuildDir, "build")
	if err := copyTree(c.Src, src); err != nil {
		return fail("copy", err)
	}
	top := filepath.Join(src, "CMakeLists.txt")
	text, err := os.ReadFile(top)
	if err != nil {
		return fail("copy", err)
	}
	if patched, ok := dropTestSubdir(string(text)); ok {
		fmt.Fprintln(&log, "# CMakeLists.txt: add_subdirectory(test) removed (FindCUDA tests; only libvgpu.so is built)")
		if err := os.WriteFile(top, []byte(patched), 0o644); err != nil {
			return fail("copy", err)
		}
	}
	start := time.Now()
	bctx, cancel := context.WithTimeout(ctx, hamiCoreBuildTimeout)
	defer cancel()
	env := []string{"CUDA_HOME=" + home, "PATH=" + filepath.Dir(nvcc) + ":" + os.Getenv("PATH")}
	step := func(args ...string) error {
		fmt.Fprintf(&log, "$ %s %s\n", c.CMake, strings.Join(args, " "))
		o, e, err := h.run(bctx, env, c.CMake, args...)
		log.Write(o)
		log.Write(e)
		if err != nil && bctx.Err() != nil {
			err = fmt.Errorf("did not finish within %s (%v)", hamiCoreBuildTimeout, err)
		}
		return err
	}
	if err := step(hamiCoreCMakeArgs(src, build, b.Stubs)...); err != nil {
		return fail("configure", err)
	}
	if err := step("--build", build, "--target", "vgpu", "-j", fmt.Sprint(runtime.NumCPU())); err != nil {
		return fail("build", err)
	}
	b.Seconds = time.Since(start).Round(100 * time.Millisecond).Seconds()
	lib := filepath.Join(build, "libvgpu.so")
	if _, err := os.Stat(lib); err != nil {
		return fail("build", errors.New("no libvgpu.so in "+build))
	}
	b.Status, b.Library = Pass, lib
	return res(b)
}

// readHAMiCoreBuild reads raw/hami-core-build.json.
func readHAMiCoreBuild(out string) (hamiCoreBuild, error) {
	var b hamiCoreBuild
	j, err := os.ReadFile(filepath.Join(rawDir(out), "hami-core-build.json"))
	if err == nil {
		err = json.Unmarshal(j, &b)
	}
	return b, err
}
