package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stageForTest builds gpucheck (static) into a temporary stage with run.sh and the Python
// clients, the layout build.sh makes (without the cgo binaries and HAMi-core's source).
func stageForTest(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	stage := t.TempDir()
	cmd := exec.Command(goBin, "build", "-o", filepath.Join(stage, "bin", "gpucheck"), ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building gpucheck: %v\n%s", err, b)
	}
	for _, f := range []string{"run.sh", "mps_check.py", "isolation_probe.py"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stage, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return stage
}

// runScript runs the staged run.sh with env added and returns its output, exit status and the
// summary it wrote.
func runScript(t *testing.T, stage string, env ...string) (string, int, Summary) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command("bash", filepath.Join(stage, "run.sh"))
	cmd.Env = append(os.Environ(), append([]string{"OUT=" + out}, env...)...)
	b, err := cmd.CombinedOutput()
	rc := 0
	if ee, ok := err.(*exec.ExitError); ok {
		rc = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var s Summary
	j, rerr := os.ReadFile(filepath.Join(out, "summary.json"))
	if rerr != nil || json.Unmarshal(j, &s) != nil {
		t.Fatalf("no summary.json (%v); output:\n%s", rerr, b)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.txt")); err != nil {
		t.Fatalf("no summary.txt: %v", err)
	}
	checkPacked(t, out)
	return string(b), rc, s
}

// checkPacked: what the device tool brings back (at most 8 files, two folders down) is all
// there: $OUT holds the two summaries and one archive with raw/ and results/.
func checkPacked(t *testing.T, out string) {
	t.Helper()
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "outputs.tar.gz summary.json summary.txt"; got != want {
		t.Fatalf("$OUT holds %q, want %q", got, want)
	}
	list, err := exec.Command("tar", "-tzf", filepath.Join(out, "outputs.tar.gz")).CombinedOutput()
	if err != nil {
		t.Fatalf("tar -tzf outputs.tar.gz: %v\n%s", err, list)
	}
	if !strings.Contains(string(list), "raw/run.log") {
		t.Errorf("outputs.tar.gz lacks raw/run.log; it holds:\n%s", list)
	}
}

// TestRunScript runs the staged run.sh (one build of gpucheck for both cases).
func TestRunScript(t *testing.T) {
	stage := stageForTest(t)
	t.Run("SkipsWithoutGPU", func(t *testing.T) { runScriptSkipsWithoutGPU(t, stage) })
	t.Run("BoundedWhenAStepHangs", func(t *testing.T) { runScriptBoundedWhenAStepHangs(t, stage) })
	t.Run("IsolationSkipsWithoutHAMiCore", func(t *testing.T) { runScriptIsolationSkipsWithoutHAMiCore(t, stage) })
}

// The skip path of run.sh where no GPU is present: exit 0 and a summary saying why.
func runScriptSkipsWithoutGPU(t *testing.T, stage string) {
	outText, rc, s := runScript(t, stage, "NVIDIA_SMI=nvidia-smi-absent-in-this-test")
	reason := "no NVIDIA GPU here: nvidia-smi-absent-in-this-test not found in PATH"
	if rc != 0 || s.Overall != Skip || s.Reason != reason || len(s.Checks) != len(checkNames) {
		t.Fatalf("rc %d, summary %s (%s) with %d checks; want 0, skip (%s)\n%s", rc, s.Overall, s.Reason, len(s.Checks), reason, outText)
	}
	if !strings.Contains(outText, "hami-go real-GPU check: SKIP ("+reason+")") {
		t.Fatalf("output lacks the summary line:\n%s", outText)
	}
	if !strings.Contains(outText, "isolation: one 4000 MiB / 30% slice on GPU 0") || !strings.Contains(outText, "  isolation-mps   -  ") ||
		!strings.Contains(outText, "  isolation-2gpu  -  ") {
		t.Fatalf("output lacks the isolation table:\n%s", outText)
	}
	for _, c := range s.Checks[1:] { // dra-driver and isolation included: every check skips with the reason
		if c.Status != Skip || c.Reason != reason {
			t.Errorf("check %s: %s (%s), want skip (%s)", c.Name, c.Status, c.Reason, reason)
		}
	}
}

// The time bound: a hanging nvidia-smi is cut off, and the summary still comes, failing the
// checks that did not finish.
func runScriptBoundedWhenAStepHangs(t *testing.T, stage string) {
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "nvidia-smi"), []byte("#!/bin/sh\nsleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	outText, rc, s := runScript(t, stage, "HAMI_GO_GPU_CHECK_SECONDS=2", "PATH="+fake+":"+os.Getenv("PATH"))
	if rc != 1 || s.Overall != Fail || s.Checks[0].Reason != notFinished {
		t.Fatalf("rc %d, summary %s, preflight %+v; want 1, fail, preflight not finished\n%s", rc, s.Overall, s.Checks[0], outText)
	}
	if !strings.Contains(outText, "checks: exit 124") {
		t.Fatalf("output does not report the time bound:\n%s", outText)
	}
}

// A GPU is listed but the stage has neither the cgo binaries nor HAMi-core's source: the build
// (in the background) and both isolation checks skip, saying why; preflight fails (the cgo
// binaries cannot be read).
func runScriptIsolationSkipsWithoutHAMiCore(t *testing.T, stage string) {
	fake := t.TempDir()
	smi := "#!/bin/sh\n[ \"$1\" = -L ] && echo 'GPU 0: NVIDIA H200 (UUID: " + testUUID + ")' && exit 0\nexit 1\n"
	if err := os.WriteFile(filepath.Join(fake, "nvidia-smi"), []byte(smi), 0o755); err != nil {
		t.Fatal(err)
	}
	outText, rc, s := runScript(t, stage, "PATH="+fake+":"+os.Getenv("PATH"), "MPS_CONTROL=mps-control-absent-in-this-test")
	byName := map[string]Result{}
	for _, c := range s.Checks {
		byName[c.Name] = c
	}
	iso, isoMPS := byName["isolation"], byName["isolation-mps"]
	if rc != 1 || s.Overall != Fail || byName["preflight"].Status != Fail ||
		iso.Status != Skip || !strings.HasPrefix(iso.Reason, "HAMi-core build: no HAMi-core source in the stage") ||
		isoMPS.Status != Skip || isoMPS.Reason != "mps-control-absent-in-this-test not found in PATH: MPS is not installed here" {
		t.Fatalf("rc %d, %s (%s); isolation %s (%s); isolation-mps %s (%s)\n%s", rc, s.Overall, s.Reason, iso.Status, iso.Reason,
			isoMPS.Status, isoMPS.Reason, outText)
	}
	if !strings.Contains(outText, "hami-core-build: skip") {
		t.Fatalf("output lacks the build's line:\n%s", outText)
	}
}
