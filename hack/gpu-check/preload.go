package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// preloadScript runs under `unshare --mount --propagation private` (sh -c preloadScript sh DIR
// PRELOAD CMD ARGS...): it gives the private mount namespace an /etc whose ld.so.preload is
// PRELOAD, the file pkg/gpuenv mounts at /etc/ld.so.preload in a GPU container, as the chart's
// containers get it, without touching the host's /etc: a tmpfs on DIR (under the check's work
// folder, gone with the namespace) holds the upper and work folders of an overlay whose lower
// folder is /etc itself; then it execs CMD, which ld.so starts with the preload.
const preloadScript = `set -e
d=$1 preload=$2
shift 2
mount -t tmpfs hami-go-preload "$d"
mkdir "$d/upper" "$d/work"
cp "$preload" "$d/upper/ld.so.preload"
mount -t overlay hami-go-etc -o "lowerdir=/etc,upperdir=$d/upper,workdir=$d/work" /etc
exec "$@"`

// preloadMechanism is the Value.What that says how libvgpu.so reached the clients.
const preloadMechanism = "how libvgpu.so is preloaded into the clients"

// preloader runs the HAMi-core clients as the chart's containers run: with /etc/ld.so.preload
// naming the library and no LD_PRELOAD, in a private mount namespace. File "" is the fallback:
// the clients run with LD_PRELOAD (gpuenv's env without a preload file), Why says why.
type preloader struct {
	// File is the host preload file gpuenv mounts at /etc/ld.so.preload.
	File string
	// NSDir is the folder each namespace mounts its tmpfs on.
	NSDir string
	// Why says why the namespace is not used.
	Why string
}

// wrap returns the command that runs name with args under p: in a private mount namespace with
// the preload file as /etc/ld.so.preload, or as it is (the fallback).
func (p preloader) wrap(name string, args []string) (string, []string) {
	if p.File == "" {
		return name, args
	}
	return "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", preloadScript, "sh", p.NSDir, p.File, name}, args...)
}

// mechanism is the preloadMechanism value (report-only: the fallback is said, never silent).
func (p preloader) mechanism() Value {
	v := Value{What: preloadMechanism, Want: "/etc/ld.so.preload, no LD_PRELOAD (the chart's path: gpuenv mounts ld.so.preload)", OK: true}
	if p.File != "" {
		v.Got = "/etc/ld.so.preload: an overlay on /etc in a private mount namespace (unshare), the host's /etc untouched"
		return v
	}
	v.Got = "LD_PRELOAD (fallback: " + p.Why + ")"
	v.Note = "not the chart's mechanism: a process that drops LD_PRELOAD (env -i) escapes it here"
	return v
}

// setupPreload puts the library to test in dir as libvgpu.so with gpuenv's preload file beside it
// (so that sliceEnv mounts the file at /etc/ld.so.preload and sets no LD_PRELOAD), and checks
// that a private mount namespace shows that file as /etc/ld.so.preload while hostPreload (the
// host's /etc/ld.so.preload) stays as it was. Where that does not work (not root, no unshare, no
// overlayfs) it removes the preload file (gpuenv then sets LD_PRELOAD) and says why. It returns
// the library's path in dir, the preloader and the values it compared; the namespace's output is
// raw/<name>-preload.txt.
func setupPreload(ctx context.Context, h host, out, name, dir, lib, hostPreload string) (string, preloader, []Value, error) {
	if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
		return "", preloader{}, nil, err
	}
	b, err := os.ReadFile(lib)
	if err != nil {
		return "", preloader{}, nil, err
	}
	copyLib := filepath.Join(dir, "libvgpu.so")
	if err := os.WriteFile(copyLib, b, 0o755); err != nil {
		return "", preloader{}, nil, err
	}
	p := preloader{File: filepath.Join(dir, gpuenv.HAMiPreloadFile), NSDir: filepath.Join(dir, "ns")}
	if err := os.WriteFile(p.File, []byte(copyLib+"\n"), 0o644); err != nil {
		return "", preloader{}, nil, err
	}
	var vals []Value
	if _, err := h.lookPath("unshare"); err != nil {
		p.Why = "unshare not found in PATH"
	} else {
		before, berr := os.ReadFile(hostPreload)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		cmd, args := p.wrap("cat", []string{gpuenv.ContainerPreloadPath})
		o, e, err := h.run(cctx, nil, cmd, args...)
		cancel()
		_ = os.WriteFile(filepath.Join(rawDir(out), name+"-preload.txt"),
			[]byte(fmt.Sprintf("$ unshare --mount --propagation private ... cat /etc/ld.so.preload\n%s%s\nexit: %v\n", o, e, err)), 0o644)
		after, aerr := os.ReadFile(hostPreload)
		vals = append(vals, Value{What: "host's " + hostPreload + " unchanged by the namespace", Want: describeFile(before, berr),
			Got: describeFile(after, aerr), OK: describeFile(before, berr) == describeFile(after, aerr)})
		switch got := strings.TrimSpace(string(o)); {
		case err != nil:
			p.Why = fmt.Sprintf("no private mount namespace with an overlay on /etc here (needs root and overlayfs): %v: %s", err, tail(strings.TrimSpace(string(e)), 2))
		case got != copyLib:
			p.Why = fmt.Sprintf("the namespace's /etc/ld.so.preload reads %q, not %q", got, copyLib)
		}
	}
	if p.Why != "" {
		if err := os.Remove(p.File); err != nil {
			return "", preloader{}, nil, err
		}
		p.File = ""
	}
	return copyLib, p, append([]Value{p.mechanism()}, vals...), nil
}

// describeFile renders a file's content (or its absence) for a comparison.
func describeFile(b []byte, err error) string {
	switch {
	case os.IsNotExist(err):
		return "absent"
	case err != nil:
		return "unreadable: " + err.Error()
	}
	return fmt.Sprintf("%q", strings.TrimSpace(string(b)))
}

// envIKeys are what the env -i client keeps of the host env besides PATH and HOME: the limits
// (and the host pin of its GPU, which the runtime gives a container).
func envIKeys(k string) bool {
	return strings.HasPrefix(k, gpuenv.EnvHAMiMemoryLimitPrefix) || strings.HasPrefix(k, gpuenv.EnvHAMiSMLimit) ||
		k == gpuenv.EnvHAMiSharedCache || k == gpuenv.EnvCUDAVisibleDevices
}

// envIArgs is `env -i PATH=… HOME=… <limits>` for env: a process whose env was emptied, to show
// that /etc/ld.so.preload still loads HAMi-core where LD_PRELOAD would be gone.
func envIArgs(env map[string]string) []string {
	keep := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME")}
	for k, v := range env {
		if envIKeys(k) {
			keep[k] = v
		}
	}
	return append([]string{"-i"}, envList(keep)...)
}
