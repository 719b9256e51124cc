//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The DRA mode's names (docs/dra.md).
const (
	// draClass is the DeviceClass (and driver name) the chart installs in mode dra.
	draClass = "gpu.hami-go.io"
	// draCDIDir is the CDI directory the driver writes claim specs into on the local node
	// (draDriver.cdiDir; the node shares the host's mount namespace).
	draCDIDir = "/var/run/cdi"
	// draTaintKey is the driver's taint on an unhealthy GPU.
	draTaintKey = "gpu.hami-go.io/unhealthy"
	// draUnschedulable is what kube-scheduler's DynamicResources plugin says when no device fits.
	draUnschedulable = "cannot allocate all claims"
)

// isDRAMode reports whether the cluster runs in DRA mode: the chart installs the DeviceClass
// gpu.hami-go.io in mode dra only (HAMI_GO_MODE=dra hack/cluster/up.sh).
func (c *Cluster) isDRAMode(t testing.TB) bool {
	t.Helper()
	_, err := c.Client.ResourceV1().DeviceClasses().Get(context.Background(), draClass, metav1.GetOptions{})
	switch {
	case err == nil:
		return true
	case apierrors.IsNotFound(err):
		return false
	default:
		t.Fatalf("get DeviceClass %s: %v", draClass, err)
		return false
	}
}

// draCluster connects to the cluster and skips the test unless it is in DRA mode; it fails
// when the DRA driver has no running pod.
func draCluster(t *testing.T) *Cluster {
	t.Helper()
	c := NewCluster(t)
	if !c.isDRAMode(t) {
		t.Skipf("DRA-mode test: the cluster is in device-plugin mode (no DeviceClass %s); run it on HAMI_GO_MODE=dra hack/cluster/up.sh", draClass)
	}
	c.driverPod(t)
	return c
}

// driverPod returns the running DRA driver pod (fails when there is none).
func (c *Cluster) driverPod(t testing.TB) corev1.Pod {
	t.Helper()
	l, err := c.Client.CoreV1().Pods(chartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: labelComponent + "=dra-driver"})
	if err != nil {
		t.Fatalf("list dra-driver pods: %v", err)
	}
	for _, p := range l.Items {
		if allStarted(&p) && p.DeletionTimestamp == nil {
			return p
		}
	}
	t.Fatalf("no running dra-driver pod in %s (HAMI_GO_MODE=dra hack/cluster/up.sh; logs: %s/logs/helm.log)", chartNamespace, c.State)
	return corev1.Pod{}
}

// draNamespace is e2eNamespace that also deletes the namespace's ResourceClaims once its pods
// are gone and waits for them to go, so the next test finds the GPUs' capacity free.
func draNamespace(t *testing.T, c *Cluster) string {
	t.Helper()
	ns := e2eNamespace(t, c)
	t.Cleanup(func() {
		if os.Getenv("HAMI_GO_E2E_KEEP") == "1" {
			return
		}
		ctx := context.Background()
		zero := int64(0)
		_ = c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, nil
		})
		// Force-deleted pods free their claims' capacity in the API before the kubelet has
		// stopped their containers and unprepared the claims; the driver makes a prepare that
		// would over-commit a GPU wait for those (--prepare-wait), but each test starts on a
		// node with nothing of the last one prepared: wait for the claims' CDI specs to go.
		var uids []types.UID
		if l, err := c.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{}); err == nil {
			for _, rc := range l.Items {
				uids = append(uids, rc.UID)
			}
		}
		_ = c.Client.ResourceV1().ResourceClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		for _, uid := range uids {
			if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				_, err := os.Stat(cdiSpecPath(uid))
				return os.IsNotExist(err), nil
			}); err != nil {
				t.Logf("cleanup: claim %s of %s still prepared (%s) after 1m", uid, ns, cdiSpecPath(uid))
			}
		}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := c.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, nil
		})
		if err != nil {
			t.Logf("cleanup: ResourceClaims of %s still listed after 2m", ns)
		}
	})
	return ns
}

// draGPU is one device of the node's ResourceSlice.
type draGPU struct {
	name, uuid string
	// pciBusID is the resource.kubernetes.io/pciBusID attribute (sysfs form, "0000:07:00.0").
	pciBusID string
	index    int64
	taints   []resourcev1.DeviceTaint
}

// draGPUs returns the devices the driver publishes for the node, by device name.
func (c *Cluster) draGPUs(t testing.TB) map[string]draGPU {
	t.Helper()
	l, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceSlices: %v", err)
	}
	out := map[string]draGPU{}
	for _, s := range l.Items {
		if s.Spec.Driver != draClass || s.Spec.NodeName == nil || *s.Spec.NodeName != c.NodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			g := draGPU{name: d.Name, taints: d.Taints}
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				g.uuid = *a.StringValue
			}
			if a, ok := d.Attributes["resource.kubernetes.io/pciBusID"]; ok && a.StringValue != nil {
				g.pciBusID = *a.StringValue
			}
			if a, ok := d.Attributes["index"]; ok && a.IntValue != nil {
				g.index = *a.IntValue
			}
			out[d.Name] = g
		}
	}
	if len(out) == 0 {
		t.Fatalf("no ResourceSlice of driver %s for node %s (dra-driver log: kubectl -n %s logs -l %s=dra-driver)", draClass, c.NodeName, chartNamespace, labelComponent)
	}
	return out
}

// draBusIDs maps the UUIDs of gpus (draGPUs) to their PCI bus ids, for pciOrdered.
func draBusIDs(gpus map[string]draGPU) map[string]string {
	out := map[string]string{}
	for _, g := range gpus {
		out[g.uuid] = g.pciBusID
	}
	return out
}

// gpuClaim is what a DRA user writes: count GPUs of class gpu.hami-go.io with capacity
// requests memory (e.g. "4000Mi"; "" = the whole GPU) and cores ("" = none), and optionally a
// CEL selector on the GPU's index (index < 0: any GPU).
type gpuClaim struct {
	count         int64
	memory, cores string
	index         int
}

func (g gpuClaim) spec() resourcev1.ResourceClaimSpec {
	rq := &resourcev1.ExactDeviceRequest{DeviceClassName: draClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: g.count}
	if rq.Count == 0 {
		rq.Count = 1
	}
	caps := map[resourcev1.QualifiedName]resource.Quantity{}
	if g.memory != "" {
		caps["memory"] = resource.MustParse(g.memory)
	}
	if g.cores != "" {
		caps["cores"] = resource.MustParse(g.cores)
	}
	if len(caps) > 0 {
		rq.Capacity = &resourcev1.CapacityRequirements{Requests: caps}
	}
	if g.index >= 0 {
		rq.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.attributes["%s"].index == %d`, draClass, g.index)}}}
	}
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: rq}}}}
}

// createClaim creates the ResourceClaim ns/name.
func (c *Cluster) createClaim(t testing.TB, ns, name string, g gpuClaim) *resourcev1.ResourceClaim {
	t.Helper()
	rc, err := c.Client.ResourceV1().ResourceClaims(ns).Create(context.Background(),
		&resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: g.spec()}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create ResourceClaim %s/%s: %v", ns, name, err)
	}
	return rc
}

// claimPod is gpuPod without GPU limits whose container uses the claim named claim (or, with
// template, a claim made from the ResourceClaimTemplate of that name).
func claimPod(ns, name, claim string, template bool) *corev1.Pod {
	p := gpuPod(ns, name, gpuLimits{})
	prc := corev1.PodResourceClaim{Name: "gpu"}
	if template {
		prc.ResourceClaimTemplateName = &claim
	} else {
		prc.ResourceClaimName = &claim
	}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{prc}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return p
}

// claimAndPod creates a claim and a pod using it, both named name.
func (c *Cluster) claimAndPod(t testing.TB, ns, name string, g gpuClaim) {
	t.Helper()
	c.createClaim(t, ns, name, g)
	c.CreatePod(t, claimPod(ns, name, name, false))
}

// allocatedDevices returns the devices of ns/name's allocation (nil when not allocated).
func (c *Cluster) allocatedDevices(t testing.TB, ns, name string) (devs []string, uid types.UID) {
	t.Helper()
	rc, err := c.Client.ResourceV1().ResourceClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ResourceClaim %s/%s: %v", ns, name, err)
	}
	if rc.Status.Allocation == nil {
		return nil, rc.UID
	}
	for _, r := range rc.Status.Allocation.Devices.Results {
		devs = append(devs, r.Device)
	}
	return devs, rc.UID
}

// waitPodUnschedulable waits until the pod's PodScheduled condition is False with reason
// Unschedulable and returns its message.
func (c *Cluster) waitPodUnschedulable(t testing.TB, ns, name string, timeout time.Duration) string {
	t.Helper()
	p := c.WaitForPod(t, ns, name, timeout, "Unschedulable", func(p *corev1.Pod) bool {
		for _, cd := range p.Status.Conditions {
			if cd.Type == corev1.PodScheduled && cd.Status == corev1.ConditionFalse && cd.Reason == corev1.PodReasonUnschedulable {
				return true
			}
		}
		return false
	})
	for _, cd := range p.Status.Conditions {
		if cd.Type == corev1.PodScheduled {
			return cd.Message
		}
	}
	return ""
}

// stillPending asserts the pod is still unbound and Pending after d.
func (c *Cluster) stillPending(t testing.TB, ns, name string, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	if p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
		t.Fatalf("pod %s/%s is %s on %q, want Pending and unbound:\n%s", ns, name, p.Status.Phase, p.Spec.NodeName, c.describe(ns, name, p))
	}
}

// cdiSpecPath is the claim's CDI spec on the node (pkg/dra: gpu.hami-go.io-claim_<UID>.json).
func cdiSpecPath(uid types.UID) string {
	return filepath.Join(draCDIDir, draClass+"-claim_"+string(uid)+".json")
}

// waitCDISpec waits until the claim's CDI spec exists (want) or is gone (!want).
func waitCDISpec(t testing.TB, uid types.UID, want bool, timeout time.Duration) {
	t.Helper()
	p := cdiSpecPath(uid)
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		_, err := os.Stat(p)
		return (err == nil) == want, nil
	})
	if err != nil {
		t.Fatalf("CDI spec %s: exists = %v after %v, want %v", p, !want, timeout, want)
	}
}

// nodeIP is the node's InternalIP (10.200.0.2 on the local cluster).
func (c *Cluster) nodeIP(t testing.TB) string {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %s: %v", c.NodeName, err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatalf("node %s has no InternalIP", c.NodeName)
	return ""
}

// fakeFault injects a fault on a GPU of the node: path "xid" with xid, or "recover". With the
// nvml backend (the local node's simulated driver, docs/simgpu.md) it goes to the driver, as a
// real XID would: `simgpu xid|recover` on the driver's socket; with the fake backend to the node
// agent's fault API on agentMetricsPort (--fake-fault-injection; the chart's
// devicePlugin.fake.faultInjection).
func (c *Cluster) fakeFault(t testing.TB, path, uuid string, xid int) {
	t.Helper()
	if c.agentBackend(t) == "nvml" {
		args := []string{path, "--socket", filepath.Join(c.State, "driver/run/nvidia-persistenced/socket"), "--gpu", uuid}
		if path == "xid" {
			args = append(args, "--xid", fmt.Sprint(xid))
		}
		if out, err := exec.Command(filepath.Join(c.State, "bin/simgpu"), args...).CombinedOutput(); err != nil {
			t.Fatalf("simgpu %v: %v\n%s", args, err, out)
		}
		return
	}
	q := url.Values{"uuid": {uuid}}
	if path == "xid" {
		q.Set("xid", fmt.Sprint(xid))
	}
	u := fmt.Sprintf("http://%s:%d/debug/fake/%s?%s", c.nodeIP(t), c.agentMetricsPort(t), path, q.Encode())
	resp, err := http.Post(u, "", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", u, resp.Status)
	}
}

// agentBackend is the node agent's --backend ("nvml" or "fake"), read from its pod's args.
func (c *Cluster) agentBackend(t testing.TB) string {
	t.Helper()
	p := c.agentPod(t)
	for _, ct := range p.Spec.Containers {
		for _, a := range ct.Args {
			if b, ok := strings.CutPrefix(a, "--backend="); ok {
				return b
			}
		}
	}
	return "fake"
}

// agentPod is the running node agent's pod: the DRA driver's in DRA mode, else the device
// plugin's (the one not being deleted).
func (c *Cluster) agentPod(t testing.TB) corev1.Pod {
	t.Helper()
	if c.isDRAMode(t) {
		return c.driverPod(t)
	}
	var p corev1.Pod
	for _, dp := range c.devicePluginPods(t) {
		if dp.DeletionTimestamp == nil {
			p = dp
		}
	}
	if p.Name == "" {
		t.Fatalf("no running device plugin pod in %s on node %s", chartNamespace, c.NodeName)
	}
	return p
}

// agentMetricsPort is the node agent's metrics port (its container port "metrics"): the DRA
// driver's in DRA mode (the chart's draDriver.metricsPort, 9401 on the local cluster, where both
// agents share the node's network during a mode switch), else the device plugin's.
func (c *Cluster) agentMetricsPort(t testing.TB) int32 {
	t.Helper()
	p := c.agentPod(t)
	for _, ctr := range p.Spec.Containers {
		for _, port := range ctr.Ports {
			if port.Name == "metrics" {
				return port.ContainerPort
			}
		}
	}
	t.Fatalf("node agent pod %s has no container port named metrics", p.Name)
	return 0
}

// waitTaint waits until the device's taints include (want) or lack (!want) draTaintKey.
func (c *Cluster) waitTaint(t testing.TB, device string, want bool, timeout time.Duration) draGPU {
	t.Helper()
	var g draGPU
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		g = c.draGPUs(t)[device]
		has := false
		for _, tn := range g.taints {
			has = has || tn.Key == draTaintKey
		}
		return has == want, nil
	})
	if err != nil {
		t.Fatalf("device %s: taint %s present = %v after %v, want %v (taints %+v)", device, draTaintKey, !want, timeout, want, g.taints)
	}
	return g
}

// envLines renders the env entries of keys that start with one of prefixes, sorted, one a line.
func envLines(env map[string]string, prefixes ...string) string {
	var b strings.Builder
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				fmt.Fprintf(&b, "%s=%s\n", k, env[k])
				break
			}
		}
	}
	return b.String()
}

// draRegistered is what the kubelet (v1.37 pkg/kubelet/cm/dra/plugin) logs when the driver's
// DRA service is connected after its registration.
const draRegistered = `"Connection changed" logger="DRA registration handler" driverName="` + draClass + `"`

// kubeletLogSize is the kubelet log's size now (an offset for waitDRARegistered).
func (c *Cluster) kubeletLogSize(t testing.TB) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(c.State, "logs", "kubelet.log"))
	if err != nil {
		t.Fatalf("kubelet log: %v", err)
	}
	return fi.Size()
}

// waitDRARegistered waits until the kubelet has logged, after offset, that the driver's DRA
// service is connected: a claim prepared before that fails with "DRA driver gpu.hami-go.io is
// not registered" and the kubelet retries it only after a backoff (about a minute).
func (c *Cluster) waitDRARegistered(t testing.TB, offset int64, timeout time.Duration) {
	t.Helper()
	path := filepath.Join(c.State, "logs", "kubelet.log")
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(path)
		if err != nil || int64(len(b)) < offset {
			return false, nil
		}
		for _, l := range strings.Split(string(b[offset:]), "\n") {
			if strings.Contains(l, draRegistered) && strings.Contains(l, "connected=true") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the kubelet logged no %s connected=true within %v (%s)", draRegistered, timeout, path)
	}
}
