package deviceplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// LeaseRenewInterval is how often the node's liveness Lease is renewed.
const LeaseRenewInterval = 10 * time.Second

// leaseDurationSeconds is the Lease's declared duration (several renewals).
const leaseDurationSeconds = 40

// NodeLabels returns the GFD-style labels for an inventory: product (first GPU's model with
// spaces as '-', as GFD writes it), count, memory (MinGPUMemoryMiB: the smallest GPU's total
// memory in MiB, so that on a node with two GPU models every GPU holds at least the label),
// replicas (split count) and sharing strategy ("mps" under MPS, "time-slicing" when split > 1,
// else "none").
func NodeLabels(inv *device.Inventory, enforcement string) map[string]string {
	if len(inv.GPUs) == 0 {
		return map[string]string{device.LabelGPUCount: "0"}
	}
	strategy := "none"
	if enforcement == gpuenv.EnforceMPS {
		strategy = "mps"
	} else if inv.SplitCount > 1 {
		strategy = "time-slicing"
	}
	return map[string]string{
		device.LabelGPUProduct:         labelValue(inv.GPUs[0].Model),
		device.LabelGPUCount:           strconv.Itoa(len(inv.GPUs)),
		device.LabelGPUMemory:          strconv.FormatInt(MinGPUMemoryMiB(inv), 10),
		device.LabelGPUReplicas:        strconv.Itoa(inv.SplitCount),
		device.LabelGPUSharingStrategy: strategy,
	}
}

// MinGPUMemoryMiB is the value of the label nvidia.com/gpu.memory (device.LabelGPUMemory): the
// smallest total memory among the inventory's GPUs, MiB, as NVML reports it (device.GPU.MemoryMiB:
// the card's own, before --reserved-memory and --memory-scaling), healthy or not (a label that
// follows health would flap); 0 without GPUs. GFD writes the first GPU's memory, which on a node
// with two GPU models (an 80 GiB and a 40 GiB card) promises the larger card for every GPU. The
// label is read by node affinities and autoscaler node-group templates as "each GPU of this node
// has at least this much": the webhook's gpuMemoryNodeAffinity (pkg/webhook/affinity.go) makes a
// pod asking M MiB per GPU require nvidia.com/gpu.memory > M−1. With the smallest card's memory
// that affinity never sends a pod to a node where its GPUs might not hold it; the price is that a
// pod of more than the small card's memory avoids a mixed node although its large card would
// hold one such pod (the extender, which sees each GPU, could place it there without the
// affinity).
func MinGPUMemoryMiB(inv *device.Inventory) int64 {
	if len(inv.GPUs) == 0 {
		return 0
	}
	m := inv.GPUs[0].MemoryMiB
	for _, g := range inv.GPUs[1:] {
		m = min(m, g.MemoryMiB)
	}
	return m
}

// labelValue makes a model name a valid label value ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3").
func labelValue(s string) string {
	b := []byte(strings.TrimSpace(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	out := strings.Trim(string(b), "-_.")
	if len(out) > 63 {
		out = strings.TrimRight(out[:63], "-_.")
	}
	return out
}

// PublishNode writes the inventory annotation and the GFD labels on the Node, only when they
// differ from what the Node has. It reports whether it patched.
func PublishNode(ctx context.Context, c kubernetes.Interface, inv device.Inventory, enforcement string) (bool, error) {
	enc, err := device.EncodeInventory(inv)
	if err != nil {
		return false, fmt.Errorf("inventory of node %s: %w", inv.Node, err)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, inv.Node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	labels := map[string]any{}
	for k, v := range NodeLabels(&inv, enforcement) {
		if n.Labels[k] != v {
			labels[k] = v
		}
	}
	meta := map[string]any{}
	if n.Annotations[device.AnnoInventory] != enc {
		meta["annotations"] = map[string]any{device.AnnoInventory: enc}
	}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(meta) == 0 {
		return false, nil
	}
	b, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return false, err
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, inv.Node, types.MergePatchType, b, metav1.PatchOptions{})
	return err == nil, err
}

// RenewLease creates or renews the Lease hami-go-<node> in namespace: renew time = now, duration
// 40 s, and holder = holder (the agent's identity: its pod's name, else the node's) when hold
// (the kubelet has the plugin's devices: Plugin.Serving), else the empty holder: released
// (device.LeaseReleased; case C45), so the extender places no GPU pod on the node while its
// kubelet would fail it at admission. Taking the Lease (a holder set where it was released) sets
// the acquire time.
func RenewLease(ctx context.Context, c kubernetes.Interface, namespace, node, holder string, clk clock.PassiveClock, hold bool) error {
	_, err := writeLease(ctx, c, namespace, node, holder, clk, hold, false)
	return err
}

// ReleaseLease releases the Lease hami-go-<node> (holder "") for a stopping agent holder, unless
// another agent holds it by now (the next agent on the node, started while this one hands over):
// it returns false then.
func ReleaseLease(ctx context.Context, c kubernetes.Interface, namespace, node, holder string, clk clock.PassiveClock) (bool, error) {
	return writeLease(ctx, c, namespace, node, holder, clk, false, true)
}

// writeLease is RenewLease, and with onlyOwn ReleaseLease: a Lease held by another identity than
// holder (or node, which agents before the hand-over wrote) is left alone.
func writeLease(ctx context.Context, c kubernetes.Interface, namespace, node, holder string, clk clock.PassiveClock, hold, onlyOwn bool) (bool, error) {
	name := device.LeasePrefix + node
	now := metav1.NewMicroTime(clk.Now())
	id := ptr.To("") // released (device.LeaseReleased)
	if hold {
		id = ptr.To(holder)
	}
	leases := c.CoordinationV1().Leases(namespace)
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: id, LeaseDurationSeconds: ptr.To[int32](leaseDurationSeconds),
				AcquireTime: &now, RenewTime: &now,
			},
		}, metav1.CreateOptions{})
		return err == nil, err
	}
	if err != nil {
		return false, err
	}
	if cur := ptr.Deref(l.Spec.HolderIdentity, ""); onlyOwn && cur != "" && cur != holder && cur != node {
		return false, nil
	}
	if hold && device.LeaseReleased(l) {
		l.Spec.AcquireTime = &now
	}
	l.Spec.HolderIdentity = id
	l.Spec.LeaseDurationSeconds = ptr.To[int32](leaseDurationSeconds)
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err == nil, err
}

// WithdrawNode removes what PublishNode and RenewLease put on the node when the agent leaves it
// for good (nodeagent.RemovalOf): the inventory annotation, the GFD labels whose value is the one
// this inventory gives (a label another writer changed, NVIDIA's GFD for example, is left), and
// the Lease. What is already gone is no error. The extender then sees no device-plugin node,
// and a node switched to DRA mode is not taken for a stale device-plugin node (issue 28).
func WithdrawNode(ctx context.Context, c kubernetes.Interface, inv device.Inventory, enforcement, leaseNamespace string) error {
	n, err := c.CoreV1().Nodes().Get(ctx, inv.Node, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("withdraw from node %s: %w", inv.Node, err)
	}
	if err == nil {
		labels := map[string]any{}
		for k, v := range NodeLabels(&inv, enforcement) {
			if cur, ok := n.Labels[k]; ok && cur == v {
				labels[k] = nil
			}
		}
		meta := map[string]any{}
		if _, ok := n.Annotations[device.AnnoInventory]; ok {
			meta["annotations"] = map[string]any{device.AnnoInventory: nil}
		}
		if len(labels) > 0 {
			meta["labels"] = labels
		}
		if len(meta) > 0 {
			b, err := json.Marshal(map[string]any{"metadata": meta})
			if err != nil {
				return err
			}
			if _, err := c.CoreV1().Nodes().Patch(ctx, inv.Node, types.MergePatchType, b, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("withdraw the inventory and labels from node %s: %w", inv.Node, err)
			}
		}
	}
	err = c.CoordinationV1().Leases(leaseNamespace).Delete(ctx, device.LeasePrefix+inv.Node, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Lease %s/%s%s: %w", leaseNamespace, device.LeasePrefix, inv.Node, err)
	}
	return nil
}
