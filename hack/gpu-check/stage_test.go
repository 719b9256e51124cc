package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// stageHAMiCore runs stage-hami-core.sh from the repository root into a new stage with env
// added; it returns the stage, the lines it printed (BUILD.txt's) and the error.
func stageHAMiCore(t *testing.T, env ...string) (string, string, error) {
	t.Helper()
	stage := t.TempDir()
	cmd := exec.Command("bash", "hack/gpu-check/stage-hami-core.sh", stage)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), env...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if err != nil {
		err = &exec.Error{Name: e.String(), Err: err}
	}
	return stage, o.String(), err
}

// gitRepo makes a HAMi-core-like repository with two commits; it returns it and both commits.
func gitRepo(t *testing.T) (dir, first, second string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not in PATH")
	}
	dir = t.TempDir()
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	git("init", "-q")
	_ = os.WriteFile(filepath.Join(dir, "CMakeLists.txt"), []byte("project(libvgpu)\n"), 0o644)
	_ = os.MkdirAll(filepath.Join(dir, "test"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "test", "t.c"), nil, 0o644)
	git("add", ".")
	git("commit", "-q", "-m", "shipped")
	first = git("rev-parse", "HEAD")
	_ = os.WriteFile(filepath.Join(dir, "CMakeLists.txt"), []byte("project(libvgpu)\n# newer\n"), 0o644)
	git("commit", "-q", "-am", "newer")
	return dir, first, git("rev-parse", "HEAD")
}

// build.sh's staging: the shipped commit when the source has it, else HEAD recorded as NOT the
// shipped version; a prebuilt library preferred, with its sha256.
func TestStageHAMiCore(t *testing.T) {
	repo, first, second := gitRepo(t)
	// The source has the shipped commit: that commit is staged, not HEAD.
	stage, lines, err := stageHAMiCore(t, "HAMI_GO_HAMI_CORE_SRC="+repo, "HAMI_GO_HAMI_CORE_COMMIT="+first, "HAMI_GO_HAMI_CORE_LIB=")
	if err != nil {
		t.Fatal(err)
	}
	if want := "hami-core shipped: " + first + " (docker.io/projecthami/hamicore:v2.10.0, the chart's hamiCore.image)\n" +
		"hami-core staged: source of " + first + " from " + repo + ", the shipped version\n"; lines != want {
		t.Fatalf("lines =\n%s\nwant\n%s", lines, want)
	}
	if b, _ := os.ReadFile(filepath.Join(stage, "hami-core-src", "CMakeLists.txt")); string(b) != "project(libvgpu)\n" {
		t.Fatalf("staged CMakeLists.txt = %q, want the shipped commit's", b)
	}
	if _, err := os.Stat(filepath.Join(stage, "hami-core-src", "test")); err == nil {
		t.Fatal("test/ staged")
	}
	b := buildHAMiCore(context.Background(), (&fakeHost{}).host(), outDir(t), hamiCoreConfig{Src: filepath.Join(stage, "hami-core-src"), BuildDir: t.TempDir(),
		CMake: "cmake", NVCC: "nvcc", Info: filepath.Join(stage, hamiCoreInfoFile), Prebuilt: filepath.Join(stage, "hami-core-lib", "libvgpu.so")})
	if !b.Shipped || b.Commit != first || !strings.HasPrefix(b.Version, "HAMi-core: the shipped version: built here from "+first[:12]) {
		t.Fatalf("build of the shipped commit = %+v", b)
	}
	// The default pin, which this source lacks: HEAD, NOT the shipped version.
	stage, lines, err = stageHAMiCore(t, "HAMI_GO_HAMI_CORE_SRC="+repo, "HAMI_GO_HAMI_CORE_COMMIT=", "HAMI_GO_HAMI_CORE_LIB=")
	if err != nil {
		t.Fatal(err)
	}
	if want := "hami-core shipped: b216ba1be1b8e21488d1c7370ed3357b3049aad1 (docker.io/projecthami/hamicore:v2.10.0, the chart's hamiCore.image)\n" +
		"hami-core staged: source of " + second + " from " + repo + ": NOT the shipped version (" + repo + " lacks b216ba1be1b8e21488d1c7370ed3357b3049aad1): " +
		"isolation results hold for that build, not for the shipped library\n"; lines != want {
		t.Fatalf("lines =\n%s\nwant\n%s", lines, want)
	}
	info := readHAMiCoreInfo(filepath.Join(stage, hamiCoreInfoFile))
	if info != (hamiCoreInfo{ShippedCommit: "b216ba1be1b8e21488d1c7370ed3357b3049aad1", ShippedImage: "docker.io/projecthami/hamicore:v2.10.0",
		StagedCommit: second, StagedFrom: repo}) {
		t.Fatalf("hami-core.env = %+v", info)
	}
	if c, _ := os.ReadFile(filepath.Join(stage, "hami-core-src", hamiCoreCommitFile)); strings.TrimSpace(string(c)) != second {
		t.Fatalf(".hami-core-commit = %q", c)
	}
	// A prebuilt library: staged as is, preferred (no source), its sha256 recorded.
	lib := filepath.Join(t.TempDir(), "libvgpu.so.v2.10.0")
	_ = os.WriteFile(lib, []byte("shipped"), 0o644)
	sum, _ := fileSHA256(lib)
	stage, lines, err = stageHAMiCore(t, "HAMI_GO_HAMI_CORE_SRC="+repo, "HAMI_GO_HAMI_CORE_COMMIT=", "HAMI_GO_HAMI_CORE_LIB="+lib)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lines, "hami-core staged: prebuilt libvgpu.so from "+lib+", sha256 "+sum+", taken as the shipped library") {
		t.Fatalf("lines =\n%s", lines)
	}
	if info := readHAMiCoreInfo(filepath.Join(stage, hamiCoreInfoFile)); info.PrebuiltSHA256 != sum || info.StagedFrom != lib {
		t.Fatalf("hami-core.env = %+v", info)
	}
	if _, err := os.Stat(filepath.Join(stage, "hami-core-src")); err == nil {
		t.Fatal("source staged beside the prebuilt library")
	}
	if _, _, err := stageHAMiCore(t, "HAMI_GO_HAMI_CORE_LIB="+lib+".absent"); err == nil || !strings.Contains(err.Error(), "is not a file") {
		t.Fatalf("absent prebuilt: %v", err)
	}
}

// The shipped image in stage-hami-core.sh is the chart's hamiCore.image: a chart bump without a
// new HAMI_GO_HAMI_CORE_COMMIT fails here.
func TestShippedHAMiCoreIsTheChartsImage(t *testing.T) {
	script, err := os.ReadFile("stage-hami-core.sh")
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile("../../charts/hami-go/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HAMI_CORE_SHIPPED_IMAGE=(\S+)$`).FindSubmatch(script)
	h := regexp.MustCompile(`(?s)\nhamiCore:\n.*?\n  image:\n    repository: (\S+)\n    tag: (\S+)\n`).FindSubmatch(values)
	if m == nil || h == nil {
		t.Fatalf("cannot find the image: script %q, values %q", m, h)
	}
	if got, want := string(m[1]), string(h[1])+":"+string(h[2]); got != want {
		t.Fatalf("stage-hami-core.sh ships %s, the chart installs %s: update HAMI_GO_HAMI_CORE_COMMIT with it", got, want)
	}
	if !regexp.MustCompile(`(?m)^HAMI_GO_HAMI_CORE_COMMIT=\$\{HAMI_GO_HAMI_CORE_COMMIT:-b216ba1be1b8e21488d1c7370ed3357b3049aad1\}$`).Match(script) {
		t.Fatal("HAMI_GO_HAMI_CORE_COMMIT's default is not HAMi v2.10.0's libvgpu pin")
	}
}
