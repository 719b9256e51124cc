// Package cluster holds the tests of the local cluster's shell scripts (hack/cluster/*.sh), run
// by `go test` with a stand-in `go` (testdata/fakego/go) first on PATH: no tool is really built.
package cluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var tools = []string{"kube-apiserver", "kube-scheduler", "kubelet", "kube-controller-manager", "kubectl", "etcd", "helm", "kuberay-operator", "containerd", "ctr", "containerd-shim-runc-v2", "prometheus", "promtool", "nvidia-ctk", "nvidia-cdi-hook", "nvidia-container-runtime"}

// script runs bash with args in its own process group, with the fake go first on PATH, the tool
// cache in cache and a heartbeat every second; it returns stdout, stderr and the exit status. It
// fails the test when a process of the group (a heartbeat ticker) outlives the script or holds its
// output open.
func script(t *testing.T, cache string, env []string, signal func(*exec.Cmd, func() string), args ...string) (string, string, int) {
	t.Helper()
	fake, _ := filepath.Abs("testdata/fakego")
	cmd := exec.Command("bash", args...)
	cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"), "HAMI_GO_CACHE="+cache, "HAMI_GO_HEARTBEAT_S=1")
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout bytes.Buffer
	lw := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = &stdout, lw
	cmd.WaitDelay = 5 * time.Second // a leaked writer of stderr makes Wait return ErrWaitDelay
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if signal != nil {
		signal(cmd, lw.String)
	}
	err := cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if cmd.ProcessState.Sys().(syscall.WaitStatus).Signaled() {
		code = 128 + int(cmd.ProcessState.Sys().(syscall.WaitStatus).Signal())
	}
	if err == exec.ErrWaitDelay {
		t.Errorf("a process kept the script's output open after it exited")
	}
	if left := groupMembers(cmd.Process.Pid); len(left) > 0 {
		t.Errorf("processes of the script's group still run: %v", left)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	return stdout.String(), lw.String(), code
}

// groupMembers lists "pid: command" of the live processes in process group pgid (from /proc),
// leaving out those already exiting.
func groupMembers(pgid int) []string {
	var out []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so split after the last ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[0] != "X" && f[2] == strconv.Itoa(pgid) {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
			if len(cmdline) == 0 {
				continue // exiting: its memory (and command line) already released, not yet a zombie
			}
			out = append(out, fmt.Sprintf("%d: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return out
}

// A cold build prints, per tool, "[i/16] <tool>: building ..." and "[i/16] <tool>: built in Ns", a
// heartbeat while a slow one builds, and the bin directory on stdout; a warm run says "cached"
// for each (issue 18: 31 silent minutes).
func TestBuildToolsProgress(t *testing.T) {
	cache := t.TempDir()
	stdout, stderr, code := script(t, cache, []string{"FAKE_GO_SLOW=k8s.io/kubernetes/cmd/kubelet", "FAKE_GO_SLEEP=2.5"}, nil, "build-tools.sh")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if want := filepath.Join(cache, "tools", "bin") + "\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	for i, tool := range tools {
		for _, re := range []string{
			fmt.Sprintf(`(?m)^>> \[%d/16\] %s: building \S+ \(minutes on a cold cache\)$`, i+1, tool),
			fmt.Sprintf(`(?m)^>> \[%d/16\] %s: built in \d+s$`, i+1, tool),
		} {
			if !regexp.MustCompile(re).MatchString(stderr) {
				t.Errorf("stderr lacks %s:\n%s", re, stderr)
			}
		}
	}
	if !regexp.MustCompile(`(?m)^>> \[3/16\] kubelet: still running \(\d+s\)$`).MatchString(stderr) {
		t.Errorf("no heartbeat while kubelet built:\n%s", stderr)
	}
	if strings.Contains(stderr, "kube-apiserver: still running") {
		t.Errorf("a heartbeat outlived its step:\n%s", stderr)
	}

	_, stderr, code = script(t, cache, nil, nil, "build-tools.sh")
	if code != 0 {
		t.Fatalf("warm run: exit %d\n%s", code, stderr)
	}
	for i, tool := range tools {
		if !strings.Contains(stderr, fmt.Sprintf(">> [%d/16] %s: cached (", i+1, tool)) {
			t.Errorf("warm run: %s not cached:\n%s", tool, stderr)
		}
	}
	if strings.Contains(stderr, "building") {
		t.Errorf("warm run built something:\n%s", stderr)
	}
}

// `build-tools.sh promtool` (make test-unit's rule tests) builds that tool alone, counted as
// [1/1], links it into the bin directory and no other; an unknown name fails.
func TestBuildToolsSome(t *testing.T) {
	cache := t.TempDir()
	stdout, stderr, code := script(t, cache, nil, nil, "build-tools.sh", "promtool")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	bin := filepath.Join(cache, "tools", "bin")
	if stdout != bin+"\n" {
		t.Errorf("stdout %q, want %q", stdout, bin+"\n")
	}
	if !regexp.MustCompile(`(?m)^>> \[1/1\] promtool: built in \d+s$`).MatchString(stderr) || strings.Count(stderr, ": building ") != 1 {
		t.Errorf("want promtool alone built as [1/1]:\n%s", stderr)
	}
	links, _ := os.ReadDir(bin)
	if len(links) != 1 || links[0].Name() != "promtool" {
		t.Errorf("bin holds %v, want promtool alone", links)
	}
	if target, err := os.Readlink(filepath.Join(bin, "promtool")); err != nil || !strings.HasPrefix(target, filepath.Join(cache, "tools", "prometheus-v")) {
		t.Errorf("bin/promtool -> %q (%v), want the versioned build", target, err)
	}
	_, stderr, code = script(t, cache, nil, nil, "build-tools.sh", "promtool", "nosuchtool")
	if code != 2 || !strings.Contains(stderr, "build-tools.sh: unknown tool among: promtool nosuchtool") {
		t.Errorf("unknown tool: exit %d\n%s", code, stderr)
	}
}

// A failed build says which tool failed, exits non-zero and leaves no heartbeat behind.
func TestBuildToolsFailure(t *testing.T) {
	_, stderr, code := script(t, t.TempDir(), []string{"FAKE_GO_FAIL=helm.sh/helm/v3/cmd/helm"}, nil, "build-tools.sh")
	if code == 0 || !regexp.MustCompile(`(?m)^>> \[7/16\] helm: FAILED \(exit 1\) after \d+s$`).MatchString(stderr) {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if strings.Contains(stderr, "kuberay-operator") {
		t.Errorf("went on after a failure:\n%s", stderr)
	}
}

// Ctrl-C (SIGINT to the foreground process group) during a long build ends the script, the build
// and the heartbeat at once.
func TestBuildToolsInterrupt(t *testing.T) {
	start := time.Now()
	_, stderr, code := script(t, t.TempDir(), []string{"FAKE_GO_SLOW=k8s.io/kubernetes/cmd/kubelet", "FAKE_GO_SLEEP=60"},
		func(cmd *exec.Cmd, out func() string) {
			waitFor(t, out, "kubelet: still running")
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		}, "build-tools.sh")
	if code != 130 {
		t.Errorf("exit %d after SIGINT, want 130\n%s", code, stderr)
	}
	if time.Since(start) > 40*time.Second {
		t.Errorf("the script waited for the 60 s build after SIGINT")
	}
}

// up.sh's build_tools shows build-tools.sh's progress lines on the terminal and keeps all of its
// stderr (go's output too) in $LOGS/build-tools.log.
func TestUpShowsToolProgressAndLogsAll(t *testing.T) {
	logs := t.TempDir()
	_, stderr, code := script(t, t.TempDir(), []string{"LOGS_DIR=" + logs}, nil, "-c",
		`set -euo pipefail; source ./lib.sh; source ./components.sh; LOGS=$LOGS_DIR; build_tools; command -v kubectl`)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, ">> [3/16] kubelet: built in") || strings.Contains(stderr, "go: downloading") {
		t.Errorf("terminal: want progress lines only:\n%s", stderr)
	}
	log, _ := os.ReadFile(filepath.Join(logs, "build-tools.log"))
	if !strings.Contains(string(log), ">> [3/16] kubelet: built in") || !strings.Contains(string(log), "go: downloading something for k8s.io/kubernetes/cmd/kubelet") {
		t.Errorf("build-tools.log lacks progress or go's output:\n%s", log)
	}
}

// waitFor polls out until it contains s (20 s at most).
func waitFor(t *testing.T, out func() string, s string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out(), s); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("no %q in:\n%s", s, out())
			return
		}
	}
}

// lockedBuffer is a bytes.Buffer written by the script's output copier and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// eval "$(hack/cluster/env.sh)" sets KUBECONFIG to the cluster's and puts the cached tools'
// kubectl and the checkout's bin/ first on PATH (issue 18: no way in after the demo).
func TestEnvSh(t *testing.T) {
	cache, state := t.TempDir(), t.TempDir()
	bin := filepath.Join(cache, "tools", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "kubectl"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "kubeconfig"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	repoBin, _ := filepath.Abs("../../bin")
	stdout, stderr, code := script(t, cache, []string{"HAMI_GO_STATE=" + state}, nil, "-c",
		`eval "$(./env.sh)"; echo "$KUBECONFIG"; echo "$HAMI_GO_STATE"; command -v kubectl; IFS=: read -r a b _ <<<"$PATH"; echo "$a $b"`)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(stdout, "\n")
	want := []string{filepath.Join(state, "kubeconfig"), state, filepath.Join(bin, "kubectl")}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d: %q, want %q (output %q)", i, lines[i], w, stdout)
		}
	}
	if lines[3] != bin+" "+repoBin {
		t.Errorf("PATH starts %q, want %q", lines[3], bin+" "+repoBin)
	}

	// No cluster yet: the lines still come, with a warning on stderr.
	_, stderr, code = script(t, cache, []string{"HAMI_GO_STATE=" + t.TempDir()}, nil, "./env.sh")
	if code != 0 || !strings.Contains(stderr, "is the cluster up (make cluster-up)") {
		t.Errorf("without a cluster: exit %d, stderr %q", code, stderr)
	}
}
