//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/deviceplugin"
)

// TestAgentLeavingNodeWithdrawsItsPublication (case C45, issue 28, device-plugin mode): the node relabelled
// hami-go.io/mode=dra (the migration docs/dra.md describes) takes the device plugin off it; the
// leaving agent withdraws its inventory annotation, GFD labels, Lease, preflight condition and
// the node's extended resources (hami-go.io/gpu-memory and the per-GPU slice names' totals),
// so no tool takes the node for a stale device-plugin node. A restart keeps them (the
// annotation is there as soon as the pod is deleted and while the next starts). Relabelled back,
// the next agent publishes them again.
func TestAgentLeavingNodeWithdrawsItsPublication(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t, "device-plugin")
	inv := c.inventory(t)
	allocatable := int64(len(inv.GPUs) * inv.SplitCount)
	ctx := context.Background()

	// A restart first: the pod deleted, the DaemonSet still selects the node.
	old := c.devicePluginPods(t)
	c.deleteNow(t, chartNamespace, old[0].Name)
	if n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{}); err != nil || n.Annotations[device.AnnoInventory] == "" {
		t.Fatalf("after the agent's restart the inventory annotation is gone (%v); a restart must keep it", err)
	}
	c.waitNewDevicePlugin(t, old, 2*time.Minute)
	c.waitAllocatable(t, allocatable, 2*time.Minute)

	c.setNodeMode(t, "dra")
	t.Cleanup(func() { c.setNodeMode(t, "deviceplugin") })
	start := time.Now()
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = nil
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if _, ok := n.Annotations[device.AnnoInventory]; ok {
			left = append(left, "annotation "+device.AnnoInventory)
		}
		for k := range deviceplugin.NodeLabels(&inv, "hami-core") {
			if _, ok := n.Labels[k]; ok {
				left = append(left, "label "+k)
			}
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == "hami-go.io/PreflightPassed" {
				left = append(left, "condition hami-go.io/PreflightPassed")
			}
		}
		for _, name := range sliceResourceNames {
			if _, ok := n.Status.Allocatable[name]; ok {
				left = append(left, "allocatable "+string(name))
			}
		}
		if _, err := c.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, device.LeasePrefix+c.NodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			left = append(left, "Lease "+device.LeasePrefix+c.NodeName)
		}
		return len(left) == 0 && len(c.devicePluginPods(t)) == 0, nil
	})
	if err != nil {
		t.Fatalf("2 minutes after node %s was relabelled hami-go.io/mode=dra: still %v (device-plugin pods: %d)", c.NodeName, left, len(c.devicePluginPods(t)))
	}
	t.Logf("the device plugin left node %s and withdrew its inventory, labels, Lease, preflight condition and extended resources %v after the relabel", c.NodeName, time.Since(start).Round(time.Millisecond))

	c.setNodeMode(t, "deviceplugin")
	c.inventory(t)
	c.waitAllocatable(t, allocatable, 2*time.Minute)
}

// TestDRADriverLeavingNodeWithdrawsItsPublication (case C45, issue 28, DRA mode): the node relabelled
// hami-go.io/mode=deviceplugin takes the DRA driver off it; the leaving driver removes the
// preflight condition and the node's GPU memory, and the kubelet its ResourceSlices. Relabelled back, the next driver
// publishes its devices again.
func TestDRADriverLeavingNodeWithdrawsItsPublication(t *testing.T) {
	c := draCluster(t)
	ctx := context.Background()
	// The node's devices as its ResourceSlices publish them (0 while none: after a kubelet
	// restart in an earlier test the kubelet wipes them and the driver publishes them again).
	devices := func(ctx context.Context) int {
		l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return -1
		}
		n := 0
		for _, s := range l.Items {
			if s.Spec.Driver == draClass && s.Spec.NodeName != nil && *s.Spec.NodeName == c.NodeName {
				n += len(s.Spec.Devices)
			}
		}
		return n
	}
	var gpus int
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		gpus = devices(ctx)
		return gpus > 0, nil
	}); err != nil {
		t.Fatalf("the DRA driver publishes no device for node %s", c.NodeName)
	}
	c.setNodeMode(t, "deviceplugin")
	t.Cleanup(func() { c.setNodeMode(t, "dra") })
	start := time.Now()
	var left []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = nil
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == "hami-go.io/PreflightPassed" {
				left = append(left, "condition hami-go.io/PreflightPassed")
			}
		}
		if _, ok := n.Status.Allocatable[device.ResourceGPUMemory]; ok {
			left = append(left, "allocatable "+device.ResourceGPUMemory)
		}
		if n := devices(ctx); n != 0 {
			left = append(left, fmt.Sprintf("%d devices in ResourceSlices", n))
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Fatalf("2 minutes after node %s was relabelled hami-go.io/mode=deviceplugin: still %v", c.NodeName, left)
	}
	t.Logf("the DRA driver left node %s; its preflight condition, GPU memory and ResourceSlices were gone %v after the relabel", c.NodeName, time.Since(start).Round(time.Millisecond))

	c.setNodeMode(t, "dra")
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return devices(ctx) == gpus, nil
	})
	if err != nil {
		t.Fatalf("relabelled dra: the driver did not publish its %d devices again within 2 minutes", gpus)
	}
}

// setNodeMode labels the node hami-go.io/mode=mode, which decides the node agent the chart's
// DaemonSets run there.
func (c *Cluster) setNodeMode(t testing.TB, mode string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"hami-go.io/mode": mode}}})
	if _, err := c.Client.CoreV1().Nodes().Patch(context.Background(), c.NodeName, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label node %s hami-go.io/mode=%s: %v", c.NodeName, mode, err)
	}
}

// nodeMode is the node's hami-go.io/mode label (up.sh sets it to the cluster's mode).
func (c *Cluster) nodeMode(t testing.TB) string {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := n.Labels["hami-go.io/mode"]
	if m != "deviceplugin" && m != "dra" {
		t.Fatalf("node %s: label hami-go.io/mode=%q, want deviceplugin or dra (hack/cluster/up.sh sets it)", c.NodeName, m)
	}
	return m
}
