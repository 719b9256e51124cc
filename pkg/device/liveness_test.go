package device

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeInventory(t *testing.T) {
	good, err := EncodeInventory(Inventory{Node: "n1", SplitCount: 10, MemoryScaling: 1,
		GPUs: []GPU{{UUID: "GPU-a", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920, Healthy: true}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, node, raw string
		present         bool
		reason          string
		decodeErr       bool
	}{
		{name: "absent", node: "n1", reason: "no inventory from device plugin"},
		{name: "absent, a value notwithstanding", node: "n1", raw: good, reason: "no inventory from device plugin"},
		{name: "good", node: "n1", raw: good, present: true},
		{name: "another node's", node: "n2", raw: good, present: true, reason: `malformed inventory from device plugin: inventory.node: "n1" is not this node`},
		{name: "not JSON", node: "n1", raw: "{", present: true, reason: "malformed inventory from device plugin: inventory: not JSON: unexpected end of JSON input", decodeErr: true},
		{name: "no node", node: "n1", raw: `{"version":"v1"}`, present: true, reason: "malformed inventory from device plugin: inventory.node is empty", decodeErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, reason, err := NodeInventory(tc.node, tc.raw, tc.present)
			if reason != tc.reason || (err != nil) != tc.decodeErr || (inv != nil) != (tc.reason == "") {
				t.Fatalf("NodeInventory = %v, %q, %v; want reason %q, decode error %v", inv, reason, err, tc.reason, tc.decodeErr)
			}
			if inv != nil && (inv.Node != "n1" || len(inv.GPUs) != 1 || inv.GPUs[0].UUID != "GPU-a") {
				t.Fatalf("inventory %+v", inv)
			}
		})
	}
}

func TestLeaseNodeAndHeartbeat(t *testing.T) {
	for name, want := range map[string]string{"hami-go-n1": "n1", "hami-go-": "", "n1": "", "kube-hami-go-n1": "", "hami-go-a.b-c": "a.b-c"} {
		if got := LeaseNode(name); got != want {
			t.Errorf("LeaseNode(%q) = %q, want %q", name, got, want)
		}
	}
	renew, acquire := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 4, 0, 0, 0, time.UTC)
	l := &coordinationv1.Lease{}
	if got := LeaseHeartbeat(l); !got.IsZero() {
		t.Errorf("no times: %v, want zero", got)
	}
	l.Spec.AcquireTime = &metav1.MicroTime{Time: acquire}
	if got := LeaseHeartbeat(l); !got.Equal(acquire) {
		t.Errorf("acquire only: %v, want %v", got, acquire)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: renew}
	if got := LeaseHeartbeat(l); !got.Equal(renew) {
		t.Errorf("renewed: %v, want %v", got, renew)
	}
}

// The node-usability rule: its verdicts in order, and the very reasons the extender's Filter
// and kubectl hami-go give.
func TestNodeUsability(t *testing.T) {
	now := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	live := NodeLiveness{Node: "n1", HasInventory: true, HasLease: true, Heartbeat: now.Add(-10 * time.Second)}
	for _, tc := range []struct {
		name   string
		edit   func(*NodeLiveness)
		want   Usability
		reason string
	}{
		{"renewed", func(*NodeLiveness) {}, Usable, ""},
		{"renewed exactly at the limit", func(n *NodeLiveness) { n.Heartbeat = now.Add(-time.Minute) }, Usable, ""},
		{"renewed in the future (clock skew)", func(n *NodeLiveness) { n.Heartbeat = now.Add(time.Hour) }, Usable, ""},
		{"stale", func(n *NodeLiveness) { n.Heartbeat = now.Add(-2 * time.Minute) }, UnusableStale,
			"inventory stale since 2026-12-01T04:58:00Z (device plugin Lease not renewed for 1m0s)"},
		{"stale, heartbeat in another zone", func(n *NodeLiveness) { n.Heartbeat = now.Add(-2 * time.Minute).In(time.FixedZone("x", 3600)) }, UnusableStale,
			"inventory stale since 2026-12-01T04:58:00Z (device plugin Lease not renewed for 1m0s)"},
		{"no Lease", func(n *NodeLiveness) { n.HasLease = false }, UnusableNoHeartbeat,
			"no heartbeat from device plugin (Lease kube-node-lease/hami-go-n1 not found)"},
		{"no inventory", func(n *NodeLiveness) { n.HasInventory, n.InventoryReason = false, ReasonNoInventory }, UnusableNoInventory,
			"no inventory from device plugin"},
		{"no inventory, no reason given", func(n *NodeLiveness) { n.HasInventory = false }, UnusableNoInventory,
			"no inventory from device plugin"},
		{"malformed, and no Lease (the inventory is checked first)", func(n *NodeLiveness) {
			n.HasInventory, n.InventoryReason, n.HasLease = false, ReasonMalformedInventory+"inventory.node is empty", false
		}, UnusableMalformed, "malformed inventory from device plugin: inventory.node is empty"},
		{"enforcement missing (case C42)", func(n *NodeLiveness) {
			n.Unenforced = "enforcement hami-core missing on the node: HAMi-core library /usr/local/vgpu/libvgpu.so not found on the host"
		}, UnusableUnenforced, "enforcement hami-core missing on the node: HAMi-core library /usr/local/vgpu/libvgpu.so not found on the host"},
		{"enforcement missing and stale (stale first)", func(n *NodeLiveness) {
			n.Unenforced, n.Heartbeat = "enforcement mps missing on the node: x", now.Add(-2*time.Minute)
		}, UnusableStale, "inventory stale since 2026-12-01T04:58:00Z (device plugin Lease not renewed for 1m0s)"},
		{"released (case C45: the agent restarting)", func(n *NodeLiveness) { n.Released = true }, UnusableReleased,
			"device plugin not serving the kubelet (Lease kube-node-lease/hami-go-n1 released: starting or restarting)"},
		{"released and stale (stale first: the agent did not come back)", func(n *NodeLiveness) {
			n.Released, n.Heartbeat = true, now.Add(-2*time.Minute)
		}, UnusableStale, "inventory stale since 2026-12-01T04:58:00Z (device plugin Lease not renewed for 1m0s)"},
		{"released and enforcement missing (released first)", func(n *NodeLiveness) {
			n.Released, n.Unenforced = true, "enforcement mps missing on the node: x"
		}, UnusableReleased, "device plugin not serving the kubelet (Lease kube-node-lease/hami-go-n1 released: starting or restarting)"},
		{"no inventory and stale", func(n *NodeLiveness) {
			n.HasInventory, n.InventoryReason, n.Heartbeat = false, ReasonNoInventory, now.Add(-time.Hour)
		}, UnusableNoInventory, "no inventory from device plugin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := live
			tc.edit(&n)
			u, reason := NodeUsability(n, "kube-node-lease", time.Minute, now)
			if u != tc.want || reason != tc.reason {
				t.Fatalf("NodeUsability = %d %q, want %d %q", u, reason, tc.want, tc.reason)
			}
		})
	}
}

// A Lease whose holder is "" is released (case C45): the device plugin is not serving the
// kubelet. One without a holder is not (written before the rule, or by another tool).
func TestLeaseReleased(t *testing.T) {
	empty, node := "", "n1"
	for _, tc := range []struct {
		holder *string
		want   bool
	}{{nil, false}, {&empty, true}, {&node, false}} {
		l := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: tc.holder}}
		if got := LeaseReleased(l); got != tc.want {
			t.Errorf("holder %v: LeaseReleased = %v, want %v", tc.holder, got, tc.want)
		}
	}
}
