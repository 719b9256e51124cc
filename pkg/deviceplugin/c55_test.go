package deviceplugin

import (
	"slices"
	"testing"

	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// case C55: the device plugin feeds the preflight's ToolkitCDISpec check the toolkit's CDI kind
// its plans name (cdi strategy only) and the node's GPUs, so a node without the toolkit's spec
// is named before every GPU container fails with "unresolvable CDI devices".
func TestC55PreflightInputNamesTheToolkitKindAndGPUs(t *testing.T) {
	for _, tc := range []struct {
		strategy, kind, want string
	}{
		{StrategyCDI, DefaultToolkitCDIKind, DefaultToolkitCDIKind},
		{StrategyCDI, "example.com/gpu", "example.com/gpu"},
		{StrategyCDI, "", ""},
		{StrategyEnvvar, DefaultToolkitCDIKind, ""}, // envvar names no CDI device
	} {
		cfg := testConfig(t.TempDir())
		cfg.DeviceListStrategy, cfg.CDISpecDir, cfg.ToolkitCDIKind = tc.strategy, t.TempDir(), tc.kind
		p, _ := newTestPlugin(t, cfg, newTestBackend(2, 81920))
		in := p.PreflightInput(nri.NewPlugin(nil))
		if in.ToolkitCDIKind != tc.want || !slices.Equal(in.GPUUUIDs, []string{"GPU-A", "GPU-B"}) {
			t.Errorf("%s --toolkit-cdi-kind=%q: kind %q GPUs %q; want %q and GPU-A, GPU-B", tc.strategy, tc.kind, in.ToolkitCDIKind, in.GPUUUIDs, tc.want)
		}
		if tc.want != "" {
			in.Backend = preflight.BackendNVML // the test backend is named fake
			if !in.ToolkitCDIApplies() {
				t.Errorf("%s --toolkit-cdi-kind=%q: the check does not apply", tc.strategy, tc.kind)
			}
		}
	}
}
