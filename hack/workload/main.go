// Command workload is the static program inside the local cluster's workload image
// (docker.io/hami-go/workload:0.1.0, also tagged docker.io/rayproject/ray:2.46.0) and pause image.
// It dispatches on the base name of argv[0], so the image links one binary under several names:
//
//	ray     a stand-in for Ray's CLI: `ray start` parses its flags the way Ray does and prints what the
//	        Ray node would register (see ray.go); `ray health-check` succeeds without dialing anything.
//	envdump prints CUDA_VISIBLE_DEVICES and every HAMI_GO_*, CUDA_*, NVIDIA_* variable; then, as
//	        a container's main process (PID 1) or with --wait, waits for SIGTERM or SIGINT; under
//	        `kubectl exec` (not PID 1) or with --no-wait it returns at once (see envdump.go).
//	sleep   sleeps for its argument in seconds (or "infinity"), until SIGTERM.
//	pause   waits for SIGTERM or SIGINT (the pod sandbox).
//	wget    fetches a URL (the options KubeRay's probes use; see wget.go).
//
// Called as `workload <name> args...` it runs <name>. Exit status: 0 on success or signal, 1 on a
// Ray-like runtime failure, 2 on bad usage (as Ray's click CLI).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	os.Exit(run(ctx, os.Args, os.LookupEnv, os.Environ(), os.Getpid(), os.Stdout, os.Stderr))
}

// run dispatches on the program name; it returns the process exit status.
// lookup reads one variable (os.LookupEnv); environ is the whole environment ("K=V" entries);
// pid is the process's own id (os.Getpid), 1 when it is a container's main process.
func run(ctx context.Context, argv []string, lookup func(string) (string, bool), environ []string, pid int, stdout, stderr io.Writer) int {
	name := filepath.Base(argv[0])
	args := argv[1:]
	if name == "workload" {
		if len(args) == 0 {
			fmt.Fprintln(stderr, "usage: workload ray|envdump|sleep|pause|wget [args...]")
			return 2
		}
		name, args = args[0], args[1:]
	}
	switch name {
	case "ray":
		return runRay(ctx, args, lookup, stdout, stderr, defaultProbeAddrs())
	case "envdump":
		return runEnvDump(ctx, args, environ, pid, stdout, stderr)
	case "wget":
		return runWget(ctx, args, stdout, stderr)
	case "sleep":
		return runSleep(ctx, args, stderr)
	case "pause":
		<-ctx.Done()
		return 0
	default:
		fmt.Fprintf(stderr, "workload: unknown program %q (want ray, envdump, sleep, pause or wget)\n", name)
		return 2
	}
}
