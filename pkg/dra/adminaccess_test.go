package dra

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/draapi"
)

// adminClaim is testClaim with adminAccess: true on its request and on every allocation result,
// as kube-scheduler allocates a request with admin access (the consumed capacity is still
// recorded: with no capacity request, the device's defaults, 81920 MiB of an H100's memory).
// reqCores and reqSharers (0: none) are capacity requests of cores and sharers.
func adminClaim(name string, reqCores, reqSharers int64, results ...result) *resourceapi.ResourceClaim {
	c := testClaim(name, 0, reqCores, results...)
	if reqSharers > 0 {
		rq := c.Spec.Devices.Requests[0].Exactly
		if rq.Capacity == nil {
			rq.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{}}
		}
		rq.Capacity.Requests[draapi.CapacitySharers] = *resource.NewQuantity(reqSharers, resource.DecimalSI)
	}
	c.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	for i := range c.Status.Allocation.Devices.Results {
		c.Status.Allocation.Devices.Results[i].AdminAccess = ptr.To(true)
	}
	return c
}

// Issue 37 item 9: a claim with admin access (a monitoring agent's claim on a GPU) consumes none
// of the GPU's capacities, as in kube-scheduler's accounting, so the driver's last-line check
// does not count it: a tenant claim the scheduler placed beside it prepares. Before the fix the
// tenant's 81920 MiB claim was refused ("would hold 163840 MiB of prepared claims, above its
// 81920 MiB"). The check still counts every other claim, in either order and across a restart.
func TestPrepareAdminAccessConsumesNothing(t *testing.T) {
	const gpuMiB = 81920 // a fake H100's memory (dgxh100), all of it bookable in testConfig
	for _, tc := range []struct {
		name   string
		claims func(split int64) []*resourceapi.ResourceClaim
		// wantErr maps a claim name to the refusal it gets; every other claim prepares.
		wantErr map[string]string
	}{
		{
			name: "monitor first, then a tenant of the whole GPU",
			claims: func(int64) []*resourceapi.ResourceClaim {
				return []*resourceapi.ResourceClaim{
					adminClaim("monitor", 0, 0, result{device: "gpu-0", memMiB: gpuMiB}),
					testClaim("tenant", gpuMiB, 0, result{device: "gpu-0", memMiB: gpuMiB}),
				}
			},
		},
		{
			name: "tenant first, then the monitor",
			claims: func(int64) []*resourceapi.ResourceClaim {
				return []*resourceapi.ResourceClaim{
					testClaim("tenant", gpuMiB, 0, result{device: "gpu-0", memMiB: gpuMiB}),
					adminClaim("monitor", 0, 0, result{device: "gpu-0", memMiB: gpuMiB}),
				}
			},
		},
		{
			name: "monitor holding every core and sharer on paper",
			claims: func(split int64) []*resourceapi.ResourceClaim {
				return []*resourceapi.ResourceClaim{
					adminClaim("monitor", 100, split, result{device: "gpu-0", memMiB: gpuMiB, cores: 100, sharers: split}),
					testClaim("tenant", 40000, 100, result{device: "gpu-0", memMiB: 40000, cores: 100}),
				}
			},
		},
		{
			name: "the monitor hides no over-commit of tenants",
			claims: func(int64) []*resourceapi.ResourceClaim {
				return []*resourceapi.ResourceClaim{
					adminClaim("monitor", 0, 0, result{device: "gpu-0", memMiB: gpuMiB}),
					testClaim("tenant", gpuMiB, 0, result{device: "gpu-0", memMiB: gpuMiB}),
					testClaim("more", 1000, 0, result{device: "gpu-0", memMiB: 1000}),
				}
			},
			wantErr: map[string]string{"more": "would hold 82920 MiB of prepared claims, above its 81920 MiB"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			d, _ := newTestDriver(t, cfg, "dgxh100")
			claims := tc.claims(int64(d.cfg.SplitCount))
			// One claim a call: the order of preparing is the order listed.
			for _, c := range claims {
				r := prepare(t, d, c)[c.UID]
				want, refused := tc.wantErr[c.Name]
				switch {
				case refused && (r.Err == nil || !strings.Contains(r.Err.Error(), want)):
					t.Fatalf("%s: err = %v, want one containing %q", c.Name, r.Err, want)
				case !refused && r.Err != nil:
					t.Fatalf("%s: %v", c.Name, r.Err)
				}
			}
			// The admin grant is recorded as such; it counts in no GPU's use (the device order).
			var sawAdmin bool
			for _, p := range d.Prepared() {
				for _, g := range p.Grants {
					if g.AdminAccess != (p.Name == "monitor") {
						t.Fatalf("claim %s: grant AdminAccess = %v", p.Name, g.AdminAccess)
					}
					sawAdmin = sawAdmin || g.AdminAccess
				}
			}
			if !sawAdmin {
				t.Fatal("the monitor's grant was not prepared")
			}
			if u := UseOf(d.Prepared())[d.view.byName["gpu-0"].GPU.UUID]; u.MemoryMiB > gpuMiB || u.Sharers > int64(d.cfg.SplitCount) {
				t.Fatalf("gpu-0 use %+v counts the monitor's grant", u)
			}
		})
	}

	// Across a restart (the checkpoint keeps AdminAccess) the monitor still consumes nothing.
	cfg := testConfig(t.TempDir())
	d, _ := newTestDriver(t, cfg, "dgxh100")
	mon := adminClaim("monitor", 0, 0, result{device: "gpu-0", memMiB: gpuMiB})
	if r := prepare(t, d, mon)[mon.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	d2, _ := newTestDriver(t, cfg, "dgxh100")
	tenant := testClaim("tenant", gpuMiB, 0, result{device: "gpu-0", memMiB: gpuMiB})
	if r := prepare(t, d2, tenant)[tenant.UID]; r.Err != nil {
		t.Fatalf("tenant after a restart beside the monitor: %v", r.Err)
	}
	if u := UseOf(d2.Prepared())[d2.view.byName["gpu-0"].GPU.UUID]; u.MemoryMiB != gpuMiB || u.Sharers != 1 {
		t.Fatalf("gpu-0 use after restart %+v; want the tenant's 81920 MiB and 1 sharer only", u)
	}
}
