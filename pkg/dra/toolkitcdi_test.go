package dra

import (
	"slices"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/nri"
)

// case C55: --toolkit-cdi-kind names the toolkit's device of each GPU of a claim
// (<kind>=<UUID>; empty: none), and the driver feeds the kind and its GPUs to the preflight's
// ToolkitCDISpec check.
func TestC55ToolkitCDIKindConfigurable(t *testing.T) {
	for _, kind := range []string{DefaultToolkitCDIKind, "example.com/gpu", ""} {
		cfg := testConfig(t.TempDir())
		cfg.ToolkitCDIKind = kind
		d, _ := newTestDriver(t, cfg, "dgxh100")
		g := d.GPUs()
		c := testClaim("k", 4000, 25, result{device: "gpu-2", memMiB: 4000, cores: 25})
		res := prepare(t, d, c)[c.UID]
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		want := []string{"gpu.hami-go.io/claim=uid-k"}
		if kind != "" {
			want = append(want, kind+"="+g[2].GPU.UUID)
		}
		if len(res.Devices) != 1 || !slices.Equal(res.Devices[0].CDIDeviceIDs, want) {
			t.Errorf("--toolkit-cdi-kind=%q: devices %+v; want CDI ids %q", kind, res.Devices, want)
		}
		in := d.PreflightInput(nri.NewPlugin(nil))
		var uuids []string
		for _, gi := range g {
			uuids = append(uuids, gi.GPU.UUID)
		}
		if in.ToolkitCDIKind != kind || !slices.Equal(in.GPUUUIDs, uuids) || len(uuids) != 8 {
			t.Errorf("--toolkit-cdi-kind=%q: preflight input kind %q GPUs %q; want the kind and the 8 GPUs %q", kind, in.ToolkitCDIKind, in.GPUUUIDs, uuids)
		}
	}
	bad := testConfig(t.TempDir())
	bad.ToolkitCDIKind = "gpu"
	if err := bad.Validate(); err == nil || !strings.HasPrefix(err.Error(), "--toolkit-cdi-kind") {
		t.Errorf("kind %q: %v; want an error naming --toolkit-cdi-kind", bad.ToolkitCDIKind, err)
	}
}
