package device

import (
	"strings"
	"testing"
)

// An enforcing mode that is not Ready makes the node unusable for new GPU pods, with the reason;
// Ready, none and an inventory from an agent older than the field are not refused. The field
// travels through the one inventory encoder and decoder, and malformed values are refused
// naming the field.
func TestInventoryEnforcement(t *testing.T) {
	base := Inventory{Node: "n1", SplitCount: 10, MemoryScaling: 1, GPUs: []GPU{{UUID: "GPU-a", MemoryMiB: 81920, NUMANode: -1, Healthy: true}}}
	for _, tc := range []struct {
		name string
		e    *Enforcement
		want string // Unenforced
		err  string // Validate
	}{
		{"older agent", nil, "", ""},
		{"ready", &Enforcement{Mode: EnforcementHAMiCore, Ready: true, Library: "/usr/local/vgpu/libvgpu.so"}, "", ""},
		{"missing", &Enforcement{Mode: EnforcementHAMiCore, Reason: "HAMi-core library /x not found"}, "enforcement hami-core missing on the node: HAMi-core library /x not found", ""},
		{"none", &Enforcement{Mode: EnforcementNone, Ready: true}, "", ""},
		{"bad mode", &Enforcement{Mode: "strict", Ready: true}, "", `inventory.enforcement.mode: "strict" is not one of hami-core, mps, none`},
		{"no reason", &Enforcement{Mode: EnforcementMPS}, "", "inventory.enforcement.reason: empty while ready is false"},
		{"none not ready", &Enforcement{Mode: EnforcementNone, Reason: "x"}, "", "inventory.enforcement.ready: false with mode none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := base
			inv.Enforcement = tc.e
			enc, err := EncodeInventory(inv)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("EncodeInventory = %v; want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeInventory(enc)
			if err != nil {
				t.Fatal(err)
			}
			if u := got.Unenforced(); u != tc.want {
				t.Errorf("Unenforced = %q, want %q", u, tc.want)
			}
			if tc.e == nil && strings.Contains(enc, "enforcement") {
				t.Errorf("an inventory without enforcement encodes it: %s", enc)
			}
		})
	}
}
