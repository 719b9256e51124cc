package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/hack/simgpu/daemon"
)

// The end-to-end tests build libnvidia-ml.so with c/build.sh, serve a profile in-process, make
// device nodes, and run TestNVMLChild in a fresh test process (go-nvml dlopens once per process)
// that loads the library with hami-go's real pkg/nvml backend.

const (
	testNode    = "sim-node-1"
	testProfile = "dgxh100"
	// customProfile is a custom pkg/fake spec: no NVLink.
	customProfile = "2x24576:NVIDIA A10"
)

// buildLibs builds the C libraries into a temp dir and returns the libnvidia-ml path.
func buildLibs(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: cannot build the simulated libnvidia-ml.so")
	}
	out := t.TempDir()
	cmd := exec.Command("sh", "c/build.sh", out)
	cmd.Env = append(os.Environ(), "SIMGPU_DRIVER_VERSION="+daemon.DefaultDriverVersion)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("c/build.sh: %v\n%s", err, b)
	}
	return filepath.Join(out, "libnvidia-ml.so.1")
}

// serve runs the daemon for profile on a socket in a temp dir until the test ends.
func serve(t *testing.T, profile string) string {
	t.Helper()
	return serveAt(t, profile, filepath.Join(t.TempDir(), "socket"))
}

// serveAt runs the daemon for profile on socket sock until the test ends and returns sock.
func serveAt(t *testing.T, profile, sock string) string {
	t.Helper()
	devs, err := daemon.Devices(testNode, profile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := daemon.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.New(daemon.Config{Devices: devs}).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sock
}

// nodes makes a dev root with the control nodes and the nodes of profile's given host indices.
func nodes(t *testing.T, profile string, hosts []int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root: the simulated device nodes cannot be made")
	}
	devs, err := daemon.Devices(testNode, profile)
	if err != nil {
		t.Fatal(err)
	}
	var minors []int
	for _, h := range hosts {
		minors = append(minors, devs[h].Minor)
	}
	root := t.TempDir()
	if err := MakeNodes(root, minors); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "dev", "nvidia-uvm-tools")); !os.IsNotExist(err) {
		t.Errorf("nvidia-uvm-tools must not exist: %v", err)
	}
	return root
}

// childEnv is what TestNVMLChild reads.
type childEnv struct {
	Lib     string `json:"lib"`
	Socket  string `json:"socket"`
	Profile string `json:"profile"` // the daemon's pkg/fake profile
	Visible []int  `json:"visible"` // host indices the child must see; nil: no daemon expected
	// FromLibPath: the child gets neither SIMGPU_SOCKET nor SIMGPU_DEV_ROOT, so the library
	// must find Socket and the device nodes under the driver root it was loaded from.
	FromLibPath bool `json:"fromLibPath"`
}

// runChild runs TestNVMLChild with env and fails t when it fails.
func runChild(t *testing.T, env childEnv, devRoot string) {
	t.Helper()
	b, _ := json.Marshal(env)
	cmd := exec.Command(os.Args[0], "-test.run=^TestNVMLChild$", "-test.v", "-test.count=1")
	cmd.Env = []string{"SIMGPU_TEST_CHILD=" + string(b)}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SIMGPU_SOCKET=") && !strings.HasPrefix(e, "SIMGPU_DEV_ROOT=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	if !env.FromLibPath {
		cmd.Env = append(cmd.Env, "SIMGPU_SOCKET="+env.Socket, "SIMGPU_DEV_ROOT="+devRoot)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestNVMLChild") {
		t.Fatalf("child test failed: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}

func TestNVMLBackendOverSimulatedDriver(t *testing.T) {
	lib := buildLibs(t)
	sock := serve(t, testProfile)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	t.Run("all GPUs", func(t *testing.T) {
		runChild(t, childEnv{Lib: lib, Socket: sock, Profile: testProfile, Visible: all}, nodes(t, testProfile, all))
	})
	t.Run("container with GPUs 2 and 5", func(t *testing.T) {
		runChild(t, childEnv{Lib: lib, Socket: sock, Profile: testProfile, Visible: []int{2, 5}},
			nodes(t, testProfile, []int{2, 5}))
	})
	t.Run("custom profile without NVLink", func(t *testing.T) {
		runChild(t, childEnv{Lib: lib, Socket: serve(t, customProfile), Profile: customProfile, Visible: []int{0, 1}},
			nodes(t, customProfile, []int{0, 1}))
	})
	t.Run("no daemon", func(t *testing.T) {
		runChild(t, childEnv{Lib: lib, Socket: filepath.Join(t.TempDir(), "none")}, nodes(t, testProfile, all))
	})
	// The chart's devicePlugin.nvidiaDevices=driver-root: the agent loads NVML from the driver
	// root mounted at /host<driverRoot>, with no env naming the socket or the device nodes; the
	// library finds both under the root it was loaded from (c/simgpu_client.h).
	t.Run("driver root found from the library's path", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("mknod needs root: the simulated device nodes cannot be made")
		}
		// A short path: the socket's must fit sockaddr_un (108 bytes).
		root, err := os.MkdirTemp("", "sgroot")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(root) })
		devs, err := daemon.Devices(testNode, testProfile)
		if err != nil {
			t.Fatal(err)
		}
		if err := MakeNodes(root, []int{devs[1].Minor, devs[6].Minor}); err != nil {
			t.Fatal(err)
		}
		libDir := filepath.Join(root, "usr/lib/x86_64-linux-gnu")
		if err := os.MkdirAll(libDir, 0o755); err != nil {
			t.Fatal(err)
		}
		real, err := filepath.EvalSymlinks(lib)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(libDir, filepath.Base(real)), b, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Base(real), filepath.Join(libDir, "libnvidia-ml.so.1")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, "run/nvidia-persistenced"), 0o755); err != nil {
			t.Fatal(err)
		}
		sock := serveAt(t, testProfile, filepath.Join(root, "run/nvidia-persistenced/socket"))
		runChild(t, childEnv{Lib: filepath.Join(libDir, "libnvidia-ml.so.1"), Socket: sock, Profile: testProfile, Visible: []int{1, 6}, FromLibPath: true}, "")
	})
}

func TestMknodCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	root := t.TempDir()
	cmd := newRootCmd()
	cmd.SetArgs([]string{"mknod", "--dev-root", root, "--node", testNode, "--profile", testProfile})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(root, "dev"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := "nvidia-uvm nvidia0 nvidia1 nvidia2 nvidia3 nvidia4 nvidia5 nvidia6 nvidia7 nvidiactl"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("nodes %q, want %q", got, want)
	}
	fi, err := os.Stat(filepath.Join(root, "dev", "nvidia"+strconv.Itoa(daemon.Minor(0, 8))))
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 || fi.Mode().Perm() != 0o666 {
		t.Errorf("nvidia7: %v %v", fi.Mode(), err)
	}
}
