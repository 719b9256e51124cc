package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// hamiCoreInfoFile, in the stage, is build.sh's record of which HAMi-core the chart ships and
// which one it staged (KEY=VALUE lines: HAMI_CORE_SHIPPED_COMMIT, HAMI_CORE_SHIPPED_IMAGE,
// HAMI_CORE_STAGED_COMMIT, HAMI_CORE_STAGED_FROM, HAMI_CORE_PREBUILT_SHA256).
const hamiCoreInfoFile = "hami-core.env"

// hamiCoreInfo is what hamiCoreInfoFile says.
type hamiCoreInfo struct {
	// ShippedCommit is the HAMi-core commit of the library the chart installs (build.sh's
	// HAMI_GO_HAMI_CORE_COMMIT); ShippedImage the chart's image that carries it.
	ShippedCommit, ShippedImage string
	// StagedCommit is the commit of the staged source ("" for a prebuilt library or a plain
	// folder); StagedFrom where it (or the prebuilt library) came from.
	StagedCommit, StagedFrom string
	// PrebuiltSHA256 is the sha256 of the staged prebuilt libvgpu.so (HAMI_GO_HAMI_CORE_LIB).
	PrebuiltSHA256 string
}

// readHAMiCoreInfo reads build.sh's hamiCoreInfoFile; a missing file gives the zero info.
func readHAMiCoreInfo(path string) hamiCoreInfo {
	var i hamiCoreInfo
	b, err := os.ReadFile(path)
	if err != nil {
		return i
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		switch k {
		case "HAMI_CORE_SHIPPED_COMMIT":
			i.ShippedCommit = v
		case "HAMI_CORE_SHIPPED_IMAGE":
			i.ShippedImage = v
		case "HAMI_CORE_STAGED_COMMIT":
			i.StagedCommit = v
		case "HAMI_CORE_STAGED_FROM":
			i.StagedFrom = v
		case "HAMI_CORE_PREBUILT_SHA256":
			i.PrebuiltSHA256 = v
		}
	}
	return i
}

// sameCommit reports whether two commit ids (full or abbreviated, at least 7 hex digits) name
// the same commit.
func sameCommit(a, b string) bool {
	a, b = strings.ToLower(strings.TrimSpace(a)), strings.ToLower(strings.TrimSpace(b))
	if len(a) < 7 || len(b) < 7 {
		return false
	}
	return strings.HasPrefix(a, b) || strings.HasPrefix(b, a)
}

// short is a commit id's first 12 characters.
func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// fileSHA256 is the hex sha256 of the file at path.
func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}

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
	// ShippedCommit and ShippedImage name the HAMi-core the chart installs (build.sh's record).
	ShippedCommit string `json:"shippedCommit,omitempty"`
	ShippedImage  string `json:"shippedImage,omitempty"`
	// Prebuilt is true when Library is the staged prebuilt libvgpu.so (HAMI_GO_HAMI_CORE_LIB),
	// used instead of a source build; SHA256 is the library's sha256 (both kinds).
	Prebuilt bool   `json:"prebuilt,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	// Shipped is true when the library is the shipped version: the prebuilt library given as
	// the chart's, or a build of the shipped commit. Version says so in one line.
	Shipped bool   `json:"shipped"`
	Version string `json:"version,omitempty"`
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
	// Info is build.sh's hamiCoreInfoFile; Prebuilt the staged prebuilt libvgpu.so, used
	// instead of building when it exists.
	Info, Prebuilt string
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

// versionLine says whether b's library is the version the chart ships (b.Shipped) in one line
// for summary.txt: a pass of the isolation checks holds for the shipped library only when it is.
func versionLine(b hamiCoreBuild) string {
	shipped := "the chart's " + orText(b.ShippedImage, "image") + " = HAMi-core " + orText(short(b.ShippedCommit), "(unknown: no hami-core.env in the stage)")
	switch {
	case b.Prebuilt:
		b.Shipped = true
		return fmt.Sprintf("HAMi-core: prebuilt libvgpu.so sha256 %s, staged as the shipped library (%s; its commit is not verified here)", short(b.SHA256), shipped)
	case b.ShippedCommit != "" && sameCommit(b.Commit, b.ShippedCommit):
		return fmt.Sprintf("HAMi-core: the shipped version: built here from %s (%s)", short(b.Commit), shipped)
	}
	return fmt.Sprintf("HAMi-core: NOT the shipped version: built here from %s, but %s: these results hold for %s, not for the shipped library",
		orText(short(b.Commit), "an unknown commit"), shipped, orText(short(b.Commit), "that build"))
}

// withVersion fills b's version fields from info.
func withVersion(b hamiCoreBuild, info hamiCoreInfo) hamiCoreBuild {
	b.ShippedCommit, b.ShippedImage = info.ShippedCommit, info.ShippedImage
	b.Shipped = b.Prebuilt || (b.ShippedCommit != "" && sameCommit(b.Commit, b.ShippedCommit))
	b.Version = versionLine(b)
	return b
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
	info := readHAMiCoreInfo(c.Info)
	if c.Prebuilt != "" {
		if _, err := os.Stat(c.Prebuilt); err == nil {
			// The shipped library itself (e.g. taken from the chart's image): nothing to build.
			b := hamiCoreBuild{Status: Pass, Library: c.Prebuilt, Prebuilt: true}
			sum, err := fileSHA256(c.Prebuilt)
			if err != nil {
				b.Status, b.Reason = Fail, "reading the prebuilt libvgpu.so: "+err.Error()
			}
			b.SHA256 = sum
			if info.PrebuiltSHA256 != "" && sum != info.PrebuiltSHA256 {
				b.Status, b.Reason = Fail, fmt.Sprintf("the prebuilt libvgpu.so has sha256 %s, build.sh staged %s", sum, info.PrebuiltSHA256)
			}
			fmt.Fprintf(&log, "# prebuilt %s (sha256 %s), staged from %s: not built\n", c.Prebuilt, sum, info.StagedFrom)
			return res(withVersion(b, info))
		}
	}
	commit, err := os.ReadFile(filepath.Join(c.Src, hamiCoreCommitFile))
	if _, serr := os.Stat(filepath.Join(c.Src, "CMakeLists.txt")); serr != nil {
		return res(withVersion(hamiCoreBuild{Status: Skip, Reason: fmt.Sprintf("no HAMi-core source in the stage (%s): build.sh found no snapshot (set HAMI_GO_HAMI_CORE_SRC)", c.Src)}, info))
	}
	b := hamiCoreBuild{Commit: strings.TrimSpace(string(commit))}
	if err != nil {
		b.Commit = "unknown"
	}
	b = withVersion(b, info)
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
	b.SHA256, _ = fileSHA256(lib)
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
