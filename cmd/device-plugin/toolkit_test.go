package main

import (
	"strings"
	"testing"
)

// case C53: --toolkit-cdi-kind (default nvidia.com/gpu with --backend=nvml, none with fake),
// --driver-root and --dev-root reach the device plugin's config; bad values are refused naming
// the flag.
func TestC53ToolkitAndDriverRootFlags(t *testing.T) {
	env := func(string) string { return "" }
	for _, tc := range []struct {
		args                  string
		kind, driver, devRoot string
	}{
		{"--node-name=n", "nvidia.com/gpu", "/", "/"},
		{"--node-name=n --backend=fake", "", "/", "/"},
		{"--node-name=n --backend=fake --toolkit-cdi-kind=nvidia.com/gpu", "nvidia.com/gpu", "/", "/"},
		{"--node-name=n --toolkit-cdi-kind= --driver-root=/run/nvidia/driver", "", "/run/nvidia/driver", "/run/nvidia/driver"},
		{"--node-name=n --driver-root=/run/nvidia/driver --dev-root=/", "nvidia.com/gpu", "/run/nvidia/driver", "/"},
	} {
		o, err := parseOptions(strings.Fields(tc.args), env)
		if err != nil {
			t.Errorf("%s: %v", tc.args, err)
			continue
		}
		c := o.Plugin
		if c.ToolkitCDIKind != tc.kind || c.DriverRoot != tc.driver || c.EffectiveDevRoot() != tc.devRoot {
			t.Errorf("%s: kind %q, driver root %q, dev root %q; want %q, %q, %q", tc.args, c.ToolkitCDIKind, c.DriverRoot, c.EffectiveDevRoot(), tc.kind, tc.driver, tc.devRoot)
		}
	}
	for args, want := range map[string]string{
		"--node-name=n --toolkit-cdi-kind=gpu":   `--toolkit-cdi-kind: "gpu" is not a CDI kind`,
		"--node-name=n --driver-root=run/nvidia": `--driver-root: "run/nvidia" is not an absolute path`,
		"--node-name=n --dev-root=dev":           `--dev-root: "dev" is not an absolute path`,
		"--node-name=n --driver-root=":           `--driver-root is empty`,
	} {
		if _, err := parseOptions(strings.Fields(args), env); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", args, err, want)
		}
	}
}
