package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
)

// envPrefixes are the variable prefixes envdump prints besides CUDA_VISIBLE_DEVICES.
var envPrefixes = []string{"HAMI_GO_", "CUDA_", "NVIDIA_"}

// envDump writes "envdump: KEY=VALUE" lines, sorted by key, for CUDA_VISIBLE_DEVICES (always, as
// "<unset>" when absent) and every variable of environ ("K=V" entries) whose name starts with
// HAMI_GO_, CUDA_ or NVIDIA_; then one "envdump: done" line so a reader knows the list is complete.
func envDump(environ []string, w io.Writer) {
	var lines []string
	sawCUDA := false
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		for _, p := range envPrefixes {
			if strings.HasPrefix(k, p) {
				lines = append(lines, kv)
				if k == "CUDA_VISIBLE_DEVICES" {
					sawCUDA = true
				}
				break
			}
		}
	}
	if !sawCUDA {
		lines = append(lines, "CUDA_VISIBLE_DEVICES=<unset>")
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Fprintf(w, "envdump: %s\n", l)
	}
	fmt.Fprintln(w, "envdump: done")
}

// runEnvDump is the envdump program: envDump of environ, then a wait for ctx (SIGTERM or SIGINT)
// when it is a container's main process, so that the container keeps running and its log stays
// readable (test/e2e runs pods with command ["envdump"]). It waits when pid is 1 (the main process
// of a container without a shared process namespace) or args is ["--wait"], and returns at once
// when pid is not 1 (`kubectl exec POD -- envdump`) or args is ["--no-wait"]. Exit status: 0, or 2
// on any other argument.
func runEnvDump(ctx context.Context, args []string, environ []string, pid int, stdout, stderr io.Writer) int {
	wait := pid == 1
	switch {
	case len(args) == 0:
	case len(args) == 1 && args[0] == "--wait":
		wait = true
	case len(args) == 1 && args[0] == "--no-wait":
		wait = false
	default:
		fmt.Fprintf(stderr, "envdump: unexpected arguments %q (usage: envdump [--wait|--no-wait])\n", args)
		return 2
	}
	envDump(environ, stdout)
	if wait {
		<-ctx.Done()
	}
	return 0
}
