//go:build e2e && daytwo

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
)

// Node labels of the local cluster's administrator (hack/cluster/up.sh), not hami-go's: they stay.
var adminLabels = map[string]bool{"hami-go.io/mode": true, "hami-go.io/fake-profile": true}

// TestDayTwoUninstall is issue 28 item 4, in the cluster's mode (make test-daytwo runs both): with
// a sliced pod running, `helm uninstall` (its pre-delete hook first) leaves nothing of hami-go's
// on the node or in the cluster (hamiGoLeft) but what charts/hami-go/templates/NOTES.txt says it
// keeps: the running container's HAMi-core cache directory under hamiCore.hostDir; in mode dra
// also the webhook's ResourceClaimTemplate in the pod's namespace and the pod's prepared claim
// (its CDI spec and the driver's checkpoint). The pod keeps running through it: the same
// container, not restarted, with its GPU and its limits. Deleted then, it goes at once; in mode
// dra it stays terminating until the release is back (hack/cluster/up.sh), whose driver
// unprepares its claim. The test brings the release back in either mode.
func TestDayTwoUninstall(t *testing.T) {
	c := NewCluster(t)
	dra := c.isDRAMode(t)
	if dra {
		c.driverPod(t)
	} else {
		c.requireChart(t)
	}
	h := c.helm(t)
	ctx := context.Background()
	ns := e2eNamespace(t, c)
	c.CreatePod(t, gpuPod(ns, "survivor", gpuLimits{count: 1, memMiB: 3000}))
	pod := c.WaitForRunning(t, ns, "survivor", 2*time.Minute)
	env := c.containerEnv(t, ns, "survivor", "main")
	if env[envMemLimit0] != "3000m" || env[envVisible] == "" {
		t.Fatalf("survivor's env before the uninstall: %s=%q %s=%q, want 3000m and a GPU", envMemLimit0, env[envMemLimit0], envVisible, env[envVisible])
	}
	ctrID := pod.Status.ContainerStatuses[0].ContainerID

	reinstalled := false
	reinstall := func() {
		start := time.Now()
		c.clusterScript(t, "up.sh")
		reinstalled = true
		t.Logf("reinstalled the release with hack/cluster/up.sh in %v", time.Since(start).Round(time.Millisecond))
	}
	t.Cleanup(func() {
		if !reinstalled {
			reinstall()
		}
	})
	// What the check sees of hami-go before (a check that finds nothing here would prove nothing).
	before := c.hamiGoLeft(t, dra)
	for _, want := range []string{"node condition hami-go.io/PreflightPassed", "node capacity hami-go.io/gpu-memory", "MutatingWebhookConfiguration hami-go-webhook"} {
		if !slices.Contains(before, want) {
			t.Fatalf("before the uninstall the check does not see %q; it sees %v", want, before)
		}
	}
	t.Logf("before the uninstall: %d objects and publications of hami-go's", len(before))
	start := time.Now()
	out := h.run(t, "uninstall", releaseName, "--wait", "--timeout", "5m")
	took := time.Since(start)
	t.Logf("helm uninstall (pre-delete hook included) took %v: %s", took.Round(time.Millisecond), strings.TrimSpace(out))

	var left []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		left = c.hamiGoLeft(t, dra)
		return len(left) == 0, nil
	})
	if err != nil {
		t.Errorf("2 minutes after helm uninstall, hami-go left (and NOTES.txt does not list as kept):\n  %s", strings.Join(left, "\n  "))
	} else {
		t.Logf("nothing of hami-go's left %v after helm uninstall began", time.Since(start).Round(time.Millisecond))
	}

	// The pod keeps running: the same container, never restarted, its GPU and limits.
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("survivor after the uninstall: %v", err)
	}
	if !allStarted(p) || p.Status.ContainerStatuses[0].ContainerID != ctrID || p.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("survivor after the uninstall: phase %s, container %s (was %s), restarts %d; want the same container running", p.Status.Phase,
			p.Status.ContainerStatuses[0].ContainerID, ctrID, p.Status.ContainerStatuses[0].RestartCount)
	}
	now, ok := parseEnvdump(h.execIn(t, ns, "survivor", "main", "envdump", "--no-wait"))
	if !ok {
		t.Fatalf("envdump in survivor after the uninstall did not finish")
	}
	for k, v := range env {
		if now[k] != v {
			t.Errorf("survivor after the uninstall: %s=%q, was %q", k, now[k], v)
		}
	}

	// What NOTES.txt says uninstall keeps is there.
	if cache := env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]; cache != "" {
		dir := filepath.Join(c.State, "vgpu", "containers", strings.TrimSuffix(filepath.Base(cache), ".cache"))
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("the running container's HAMi-core cache directory %s (kept, NOTES.txt): %v", dir, err)
		}
	}
	if dra {
		l, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).List(ctx, metav1.ListOptions{LabelSelector: "hami-go.io/claim-template=webhook"})
		if err != nil || len(l.Items) == 0 {
			t.Errorf("the webhook's ResourceClaimTemplate in %s (kept while pods use it, NOTES.txt): %v, %d found", ns, err, len(l.Items))
		}
		claims, _ := filepath.Glob(filepath.Join(draCDIDir, draClass+"-claim_*.json"))
		if len(claims) == 0 {
			t.Errorf("no claim CDI spec in %s: the running pod's prepared claim is kept (NOTES.txt)", draCDIDir)
		}
	}

	// The pod ends. Without a device plugin nothing holds it back. In mode dra the kubelet
	// unprepares its claim through the driver, so it stays terminating until the driver is back
	// (NOTES.txt).
	// A grace period (not 0, which removes the pod from the API at once): the pod goes once its
	// kubelet has finished terminating it.
	one := int64(1)
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "survivor", metav1.DeleteOptions{GracePeriodSeconds: &one}); err != nil {
		t.Fatalf("delete survivor: %v", err)
	}
	gone := func(timeout time.Duration) bool {
		return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			_, err := c.Client.CoreV1().Pods(ns).Get(ctx, "survivor", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}) == nil
	}
	deleted := time.Now()
	if !dra {
		if !gone(time.Minute) {
			t.Fatalf("survivor, deleted after the uninstall, is still there a minute later")
		}
		t.Logf("survivor, deleted after the uninstall, was gone %v later", time.Since(deleted).Round(time.Millisecond))
		return
	}
	if gone(20 * time.Second) {
		t.Fatalf("mode dra: survivor was gone %v after its deletion with no DRA driver on the node; NOTES.txt says its claim keeps it terminating until a driver is back", time.Since(deleted).Round(time.Millisecond))
	}
	reinstall()
	if !gone(2 * time.Minute) {
		t.Fatalf("mode dra: survivor is still there 2 minutes after the DRA driver came back")
	}
	t.Logf("mode dra: survivor, deleted while no driver ran, stayed terminating until the reinstalled driver unprepared its claim, gone %v after its deletion", time.Since(deleted).Round(time.Millisecond))
}

// hamiGoLeft lists what hami-go put on the node and in the cluster that is still there, less what
// NOTES.txt says uninstall keeps.
func (c *Cluster) hamiGoLeft(t testing.TB, dra bool) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	add := func(format string, a ...any) { left = append(left, fmt.Sprintf(format, a...)) }
	n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %s: %v", c.NodeName, err)
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, device.Prefix) {
			add("node annotation %s", k)
		}
	}
	for k := range n.Labels {
		if strings.HasPrefix(k, device.Prefix) && !adminLabels[k] || strings.HasPrefix(k, "nvidia.com/gpu.") {
			add("node label %s", k)
		}
	}
	for _, cond := range n.Status.Conditions {
		if strings.HasPrefix(string(cond.Type), device.Prefix) {
			add("node condition %s", cond.Type)
		}
	}
	for k := range n.Status.Capacity {
		if strings.HasPrefix(string(k), device.Prefix) || slices.Contains(sliceResourceNames, k) {
			add("node capacity %s", k)
		}
	}
	// The kubelet keeps a device plugin's resource in the capacity for 5 minutes after the
	// plugin left (NOTES.txt), with nothing allocatable.
	if q, ok := n.Status.Allocatable[resCount]; ok && !q.IsZero() {
		add("node allocatable %s=%s", resCount, q.String())
	}
	for _, lns := range []string{"kube-node-lease", chartNamespace} {
		l, err := c.Client.CoordinationV1().Leases(lns).List(ctx, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("leases of %s: %v", lns, err)
		}
		for _, x := range l.Items {
			if lns == chartNamespace || strings.HasPrefix(x.Name, device.LeasePrefix) {
				add("Lease %s/%s", lns, x.Name)
			}
		}
	}
	slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("ResourceSlices: %v", err)
	}
	for _, s := range slices.Items {
		if s.Spec.Driver == draClass {
			add("ResourceSlice %s (%d devices)", s.Name, len(s.Spec.Devices))
		}
	}
	if _, err := c.Client.ResourceV1().DeviceClasses().Get(ctx, draClass, metav1.GetOptions{}); err == nil {
		add("DeviceClass %s", draClass)
	}
	// Every object the release labelled, cluster-wide.
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName}
	named := func(kind string, names []string, err error) {
		if err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		for _, x := range names {
			add("%s %s", kind, x)
		}
	}
	named(listNames(c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, sel)))
	named(listNames(c.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, sel)))
	named(listNames(c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, sel)))
	named(listNames(c.Client.RbacV1().ClusterRoles().List(ctx, sel)))
	named(listNames(c.Client.RbacV1().ClusterRoleBindings().List(ctx, sel)))
	named(listNames(c.Client.RbacV1().Roles("").List(ctx, sel)))
	named(listNames(c.Client.RbacV1().RoleBindings("").List(ctx, sel)))
	named(listNames(c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{})))
	named(listNames(c.Client.AppsV1().DaemonSets(chartNamespace).List(ctx, metav1.ListOptions{})))
	named(listNames(c.Client.AppsV1().Deployments(chartNamespace).List(ctx, metav1.ListOptions{})))
	named(listNames(c.Client.BatchV1().Jobs(chartNamespace).List(ctx, metav1.ListOptions{})))
	named(listNames(c.Client.CoreV1().Services(chartNamespace).List(ctx, metav1.ListOptions{})))
	named(listNames(c.Client.CoreV1().Secrets(chartNamespace).List(ctx, metav1.ListOptions{})))
	named(listNames(c.Client.CoreV1().ConfigMaps(chartNamespace).List(ctx, sel)))
	named(listNames(c.Client.CoreV1().ServiceAccounts(chartNamespace).List(ctx, sel)))
	named(listNames(c.Client.PolicyV1().PodDisruptionBudgets(chartNamespace).List(ctx, metav1.ListOptions{})))

	// Host files of the node agents: the device plugin's CDI spec and socket, the DRA driver's
	// registration socket. The DRA driver's claim specs and checkpoint stay while claims are
	// prepared (NOTES.txt), so in mode dra only its registration is looked for.
	for _, dir := range []string{"/etc/cdi", "/var/run/cdi"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), "hami-go") && !(dra && strings.HasPrefix(e.Name(), draClass+"-claim_")) {
				add("CDI spec %s/%s", dir, e.Name())
			}
		}
	}
	for _, dir := range []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/plugins_registry"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.Contains(e.Name(), "hami-go") {
				add("kubelet plugin file %s/%s", dir, e.Name())
			}
		}
	}
	sort.Strings(left)
	return left
}

// listNames turns a List call's result into its kind ("ClusterRole" of a ClusterRoleList), the
// names listed and the error, for hamiGoLeft.
func listNames(l runtime.Object, err error) (string, []string, error) {
	kind := strings.TrimSuffix(reflect.TypeOf(l).Elem().Name(), "List")
	if err != nil {
		return kind, nil, err
	}
	items, err := meta.ExtractList(l)
	if err != nil {
		return kind, nil, err
	}
	var names []string
	for _, o := range items {
		a, err := meta.Accessor(o)
		if err != nil {
			return kind, nil, err
		}
		if ns := a.GetNamespace(); ns != "" {
			names = append(names, ns+"/"+a.GetName())
		} else {
			names = append(names, a.GetName())
		}
	}
	return kind, names, nil
}
