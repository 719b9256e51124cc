package deviceplugin

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	testclock "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C45 (issue 28): an agent leaving its node for good takes back the inventory annotation, the labels
// it wrote and its Lease; a label another writer changed stays, and a second withdrawal (or one
// from a node already clean) is no error.
func TestWithdrawNode(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81920))
	inv := p.Inventory()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: inv.Node, Labels: map[string]string{"kubernetes.io/hostname": inv.Node}}}
	c := fake.NewClientset(node)
	ctx := context.Background()
	if _, err := PublishNode(ctx, c, inv, p.cfg.Enforcement); err != nil {
		t.Fatal(err)
	}
	if err := RenewLease(ctx, c, "kube-node-lease", inv.Node, inv.Node, testclock.NewFakeClock(time.Now()), true); err != nil {
		t.Fatal(err)
	}
	// NVIDIA's GPU Feature Discovery wrote its own product label meanwhile.
	n, _ := c.CoreV1().Nodes().Get(ctx, inv.Node, metav1.GetOptions{})
	n.Labels[device.LabelGPUProduct] = "NVIDIA-H100-GFD"
	if _, err := c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	for i := 0; i < 2; i++ {
		if err := WithdrawNode(ctx, c, inv, p.cfg.Enforcement, "kube-node-lease"); err != nil {
			t.Fatalf("withdrawal %d: %v", i+1, err)
		}
	}
	n, _ = c.CoreV1().Nodes().Get(ctx, inv.Node, metav1.GetOptions{})
	if _, ok := n.Annotations[device.AnnoInventory]; ok {
		t.Error("the inventory annotation is still there")
	}
	for k := range NodeLabels(&inv, p.cfg.Enforcement) {
		if v, ok := n.Labels[k]; ok && k != device.LabelGPUProduct {
			t.Errorf("label %s=%s is still there", k, v)
		}
	}
	if n.Labels[device.LabelGPUProduct] != "NVIDIA-H100-GFD" || n.Labels["kubernetes.io/hostname"] != inv.Node {
		t.Errorf("labels %v; want GFD's product and the hostname kept", n.Labels)
	}
	if _, err := c.CoordinationV1().Leases("kube-node-lease").Get(ctx, device.LeasePrefix+inv.Node, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Lease: %v; want it deleted", err)
	}
	if err := WithdrawNode(ctx, fake.NewClientset(), inv, p.cfg.Enforcement, "kube-node-lease"); err != nil {
		t.Errorf("node gone: %v", err)
	}
}
