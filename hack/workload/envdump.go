package main

import (
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
