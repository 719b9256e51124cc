package main

import (
	"strings"
	"testing"
)

// case C55: --toolkit-cdi-kind (default nvidia.com/gpu with --backend=nvml, none with fake;
// empty = none) reaches the DRA driver's config; a bad kind is refused naming the flag.
func TestC55ToolkitCDIKindFlag(t *testing.T) {
	env := func(string) string { return "" }
	for args, want := range map[string]string{
		"--node-name=n":                                                  "nvidia.com/gpu",
		"--node-name=n --toolkit-cdi-kind=":                              "",
		"--node-name=n --toolkit-cdi-kind=example.com/gpu":               "example.com/gpu",
		"--node-name=n --backend=fake":                                   "",
		"--node-name=n --backend=fake --toolkit-cdi-kind=nvidia.com/gpu": "nvidia.com/gpu",
	} {
		o, err := parseOptions(strings.Fields(args), env)
		if err != nil {
			t.Errorf("%s: %v", args, err)
			continue
		}
		if got := o.Driver.ToolkitCDIKind; got != want {
			t.Errorf("%s: kind %q, want %q", args, got, want)
		}
	}
	if _, err := parseOptions([]string{"--node-name=n", "--toolkit-cdi-kind=gpu"}, env); err == nil || !strings.Contains(err.Error(), `--toolkit-cdi-kind: "gpu" is not a CDI kind`) {
		t.Errorf("bad kind: %v", err)
	}
}
