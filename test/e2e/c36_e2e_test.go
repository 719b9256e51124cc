//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hami-go/hami-go/pkg/device"
)

// policyRefusal is the part of the allocation policy's message every refusal carries.
const policyRefusal = "may not set, change or remove hami-go.io/allocation-*"

// tenantClient creates ServiceAccount name in ns bound to the ClusterRole "edit" (and, with
// extra, to a Role that may also create bindings and pods/binding and update pods/status) and
// returns a clientset that impersonates it.
func (c *Cluster) tenantClient(t *testing.T, ns, name string, extra bool) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sub := []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}
	if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-edit"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"}, Subjects: sub}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if extra {
		if _, err := c.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name + "-bind"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"bindings", "pods/binding"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"get", "update", "patch"}},
		}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-bind"},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name + "-bind"}, Subjects: sub}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:%s", ns, name)}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// wantPolicyRefusal fails the test unless err is the allocation policy's refusal naming anno.
func wantPolicyRefusal(t *testing.T, what string, err error, anno string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: admitted, want the allocation policy's refusal", what)
	}
	if !strings.Contains(err.Error(), policyRefusal) || !strings.Contains(err.Error(), anno) {
		t.Fatalf("%s: %v; want the allocation policy's refusal naming %s", what, err, anno)
	}
	t.Logf("%s: refused: %v", what, err)
}

// TestC36TenantCannotForgeAllocationRecords is case C36 end to end: a tenant with the namespace
// "edit" role, and one that may also create Bindings and update pods/status, cannot set, change
// or remove a hami-go.io/allocation-* annotation on any path (pod create past the webhook, patch
// of a claimed record after Allocate, removal, pods/status update, pods/binding and legacy
// bindings with annotations); the API server's ValidatingAdmissionPolicy refuses each with its
// message. hami-go itself still writes its records (the tenant's GPU pod runs with its planned
// and claimed records), and a local process without kube-scheduler's client certificate gets 403
// from the extender's /bind.
func TestC36TenantCannotForgeAllocationRecords(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	ns := e2eNamespace(t, c)
	tenant := c.tenantClient(t, ns, "tenant", false)
	plus := c.tenantClient(t, ns, "tenant-plus", true)
	ctx := context.Background()
	inv := c.inventory(t)
	forged, err := device.EncodeAllocation(device.Allocation{Node: c.NodeName, Containers: []device.ContainerAllocation{{
		Name: "main", Kind: device.KindApp, Devices: []device.DeviceGrant{{UUID: inv.GPUs[0].UUID, MemoryMiB: inv.GPUs[0].MemoryMiB}}}}})
	if err != nil {
		t.Fatal(err)
	}

	// 1. Create with a forged plan, the webhook kept away (opt-out label) and nodeName preset.
	// (a whole GPU: an opted-out pod may not ask for slices, case C49)
	p := gpuPod(ns, "forged", gpuLimits{count: 1})
	p.Labels[device.LabelOptOut] = "true"
	p.Spec.NodeName = c.NodeName
	p.Annotations = map[string]string{device.AnnoPlanned: forged}
	_, err = tenant.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	wantPolicyRefusal(t, "edit: create a pod with a forged plan", err, device.AnnoPlanned)

	// 2. A real GPU pod of the tenant: hami-go writes both records (the policy lets it).
	g := gpuPod(ns, "gpu", gpuLimits{count: 1, memMiB: 1000})
	if _, err := tenant.CoreV1().Pods(ns).Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatalf("tenant's GPU pod: %v", err)
	}
	g = c.WaitForPod(t, ns, "gpu", 2*time.Minute, "claimed", func(p *corev1.Pod) bool { return p.Annotations[device.AnnoClaimed] != "" })
	c.WaitForRunning(t, ns, "gpu", 2*time.Minute)
	lowered := strings.Replace(g.Annotations[device.AnnoClaimed], `"memoryMiB":1000`, `"memoryMiB":1`, 1)
	if lowered == g.Annotations[device.AnnoClaimed] {
		t.Fatalf("claimed record %s does not grant 1000 MiB", g.Annotations[device.AnnoClaimed])
	}
	for _, who := range []struct {
		name string
		cs   kubernetes.Interface
	}{{"edit", tenant}, {"edit+bindings", plus}} {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{device.AnnoClaimed: lowered}}})
		_, err = who.cs.CoreV1().Pods(ns).Patch(ctx, "gpu", types.MergePatchType, patch, metav1.PatchOptions{})
		wantPolicyRefusal(t, who.name+": patch the claimed record after Allocate", err, device.AnnoClaimed)
		remove := []byte(`[{"op":"remove","path":"/metadata/annotations/hami-go.io~1allocation-claimed"}]`)
		_, err = who.cs.CoreV1().Pods(ns).Patch(ctx, "gpu", types.JSONPatchType, remove, metav1.PatchOptions{})
		wantPolicyRefusal(t, who.name+": remove the claimed record", err, device.AnnoClaimed)
		cur, err := who.cs.CoreV1().Pods(ns).Get(ctx, "gpu", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Annotations[device.AnnoPlanned] = forged
		_, err = who.cs.CoreV1().Pods(ns).Update(ctx, cur, metav1.UpdateOptions{})
		wantPolicyRefusal(t, who.name+": update the planned record", err, device.AnnoPlanned)
	}

	// 3. pods/status update that changes the record (the status strategy keeps annotations).
	cur, err := plus.CoreV1().Pods(ns).Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Annotations[device.AnnoClaimed] = lowered
	_, err = plus.CoreV1().Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	wantPolicyRefusal(t, "edit+bindings: pods/status update changing the claimed record", err, device.AnnoClaimed)
	got, _ := c.Client.CoreV1().Pods(ns).Get(ctx, "gpu", metav1.GetOptions{})
	if got.Annotations[device.AnnoClaimed] != g.Annotations[device.AnnoClaimed] {
		t.Fatalf("claimed record changed to %s", got.Annotations[device.AnnoClaimed])
	}

	// 4. Bindings carrying a plan, for a GPU pod nobody schedules (both Binding paths).
	u := gpuPod(ns, "unscheduled", gpuLimits{count: 1})
	u.Labels[device.LabelOptOut] = "true"
	u.Spec.SchedulerName = "nobody"
	if _, err := plus.CoreV1().Pods(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("unscheduled pod: %v", err)
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "unscheduled", Namespace: ns, Annotations: map[string]string{device.AnnoPlanned: forged}},
		Target: corev1.ObjectReference{Kind: "Node", Name: c.NodeName}}
	err = plus.CoreV1().Pods(ns).Bind(ctx, b, metav1.CreateOptions{})
	wantPolicyRefusal(t, "edit+bindings: pods/binding with a plan", err, device.AnnoPlanned)
	err = plus.CoreV1().RESTClient().Post().Namespace(ns).Resource("bindings").Body(b).Do(ctx).Error()
	wantPolicyRefusal(t, "edit+bindings: legacy bindings with a plan", err, device.AnnoPlanned)
	if p, _ := c.Client.CoreV1().Pods(ns).Get(ctx, "unscheduled", metav1.GetOptions{}); p.Spec.NodeName != "" || p.Annotations[device.AnnoPlanned] != "" {
		t.Fatalf("unscheduled pod bound to %q with plan %q", p.Spec.NodeName, p.Annotations[device.AnnoPlanned])
	}

	// 5. The extender's /bind, called by a process on the node without kube-scheduler's
	// client certificate (the scheduler pod uses the node's network here).
	body := fmt.Sprintf(`{"PodName":"unscheduled","PodNamespace":%q,"PodUID":"x","Node":%q}`, ns, c.NodeName)
	out, err := exec.Command("nsenter", "--net=/var/run/netns/hami-node1", "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}",
		"-X", "POST", "-H", "Content-Type: application/json", "-d", body, "https://127.0.0.1:8888/bind").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "403" {
		t.Fatalf("/bind from a local process without the client certificate: %q %v, want 403", out, err)
	}
	out, _ = exec.Command("nsenter", "--net=/var/run/netns/hami-node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
		"-X", "POST", "-d", body, "http://127.0.0.1:8888/bind").CombinedOutput()
	if code := strings.TrimSpace(string(out)); code != "400" && code != "000" {
		t.Fatalf("/bind over plain HTTP answered %q, want a TLS refusal", code)
	}
}
