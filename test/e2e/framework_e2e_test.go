//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// Names of the chart's objects on the local cluster (charts/hami-go, values-local.yaml).
const (
	// chartNamespace is where up.sh installs charts/hami-go.
	chartNamespace = "hami-go-system"
	// labelComponent is the chart's component label (scheduler, device-plugin, webhook).
	labelComponent = "app.kubernetes.io/component"
	// resCount, resMemory, resCores are the default resource names (docs/components.md).
	resCount  = "nvidia.com/gpu"
	resMemory = "nvidia.com/gpumem"
	resCores  = "nvidia.com/gpucores"
	// envMemLimit0 is HAMi-core's memory limit of the container's first GPU in PCI bus order
	// (CUDA ordinal 0 under CUDA_DEVICE_ORDER=PCI_BUS_ID), "<MiB>m".
	envMemLimit0 = "CUDA_DEVICE_MEMORY_LIMIT_0"
	// envSMLimitPrefix + "<i>" is HAMi-core's compute limit of the container's i-th GPU in PCI
	// bus order, percent; unset for a GPU without one. hami-go sets no global
	// CUDA_DEVICE_SM_LIMIT under HAMi-core (issue 36).
	envSMLimitPrefix = "CUDA_DEVICE_SM_LIMIT_"
	// envVisible lists the container's GPU UUIDs in PCI bus order (HAMI_GO_GPU_UUIDS).
	envVisible = device.EnvGPUUUIDs
	// envCUDAVisible is never set by hami-go (the container sees only its own GPUs, and
	// HAMi-core parses it with atoi, HAMi-core#319): envdump prints "<unset>" for it.
	envCUDAVisible = "CUDA_VISIBLE_DEVICES"
)

// pciOrdered returns uuids joined by "," in PCI bus order (gpuenv.PCIOrder, the order of
// HAMI_GO_GPU_UUIDS and every per-GPU limit), bus giving each GPU's PCI bus id in NVML or sysfs
// form (the inventory's GPU.PCIBusID, a ResourceSlice's resource.kubernetes.io/pciBusID).
func pciOrdered(uuids []string, bus map[string]string) string {
	g := make([]gpuenv.Grant, len(uuids))
	for i, u := range uuids {
		g[i] = gpuenv.Grant{UUID: u, PCIBusID: bus[u]}
	}
	return strings.Join(gpuenv.Request{Grants: gpuenv.PCIOrder(g)}.UUIDs(), ",")
}

// busIDs maps the node's GPU UUIDs to their PCI bus ids (the device plugin's inventory).
func (c *Cluster) busIDs(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range c.inventory(t).GPUs {
		out[g.UUID] = g.PCIBusID
	}
	return out
}

// wantNVIDIAVisible is the NVIDIA_VISIBLE_DEVICES a GPU container sees where hami-go would
// have it see old: exactly "void" on the simulated GPU node (the toolkit's CDI spec,
// toolkitCDISpec, exists there, and its edits, applied after hami-go's, set
// NVIDIA_VISIBLE_DEVICES=void in every container it gave GPUs: the GPUs come as CDI device
// nodes), else old.
func wantNVIDIAVisible(old string) string {
	if _, err := os.Stat(toolkitCDISpec); err == nil {
		return "void"
	}
	return old
}

// checkGPUEnv checks the device lists of a GPU container's env against its GPUs (UUIDs in PCI
// bus order): HAMI_GO_GPU_UUIDS names them, CUDA_DEVICE_ORDER=PCI_BUS_ID, no
// CUDA_VISIBLE_DEVICES, and, when nvidia is set, NVIDIA_VISIBLE_DEVICES is what
// wantNVIDIAVisible gives for them. what names the container in errors.
func checkGPUEnv(t testing.TB, what string, env map[string]string, pciUUIDs string, nvidia bool) {
	t.Helper()
	if got := env[envVisible]; got != pciUUIDs {
		t.Errorf("%s: %s=%q, want %q (its GPUs in PCI bus order)", what, envVisible, got, pciUUIDs)
	}
	if got := env[gpuenv.EnvCUDADeviceOrder]; got != gpuenv.CUDADeviceOrderPCI {
		t.Errorf("%s: %s=%q, want %s", what, gpuenv.EnvCUDADeviceOrder, got, gpuenv.CUDADeviceOrderPCI)
	}
	if got := env[envCUDAVisible]; got != "<unset>" {
		t.Errorf("%s: %s=%q, want unset (the container sees only its own GPUs)", what, envCUDAVisible, got)
	}
	if nvidia {
		if got, want := env[gpuenv.EnvNVIDIAVisibleDevices], wantNVIDIAVisible(pciUUIDs); got != want {
			t.Errorf("%s: %s=%q, want %q", what, gpuenv.EnvNVIDIAVisibleDevices, got, want)
		}
	}
}

// e2eNamespace makes a namespace for the test (harness Namespace: deleted at the end) and, before
// that, force-deletes every pod in it and waits until they are gone from the API, so the next
// test starts with the node's slices free again (a terminating namespace would hold them).
func e2eNamespace(t *testing.T, c *Cluster) string {
	t.Helper()
	ns := c.Namespace(t)
	t.Cleanup(func() {
		if os.Getenv("HAMI_GO_E2E_KEEP") == "1" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		zero := int64(0)
		_ = c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			return err == nil && len(l.Items) == 0, nil
		})
		if err != nil {
			t.Logf("cleanup: pods of %s still listed after 2m", ns)
		}
	})
	return ns
}

// gpuLimits are a container's GPU limits: count GPUs, memMiB MiB each (0 = unset), cores percent (0 = unset).
type gpuLimits struct {
	count  int
	memMiB int64
	cores  int
}

// gpuPod is a pod of one container "main" running the workload's envdump, created with the
// default scheduler (the webhook switches GPU pods to hami-go-scheduler). g.count = 0 gives
// a pod without GPU requests.
func gpuPod(ns, name string, g gpuLimits) *corev1.Pod {
	zero := int64(0)
	limits := corev1.ResourceList{}
	if g.count > 0 {
		limits[resCount] = *resource.NewQuantity(int64(g.count), resource.DecimalSI)
	}
	if g.memMiB > 0 {
		limits[resMemory] = *resource.NewQuantity(g.memMiB, resource.DecimalSI)
	}
	if g.cores > 0 {
		limits[resCores] = *resource.NewQuantity(int64(g.cores), resource.DecimalSI)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "e2e"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name:            "main",
				Image:           WorkloadImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"envdump"},
			}},
		},
	}
	if len(limits) > 0 {
		p.Spec.Containers[0].Resources.Limits = limits
	}
	return p
}

// parseEnvdump reads the "envdump: K=V" lines of a log into a map; ok is false when the
// closing "envdump: done" line is missing.
func parseEnvdump(log string) (env map[string]string, ok bool) {
	env = map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		l, found := strings.CutPrefix(sc.Text(), "envdump: ")
		if !found {
			continue
		}
		if l == "done" {
			ok = true
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	return env, ok
}

// containerEnv waits for the envdump log of ns/name's container and returns its variables.
func (c *Cluster) containerEnv(t testing.TB, ns, name, container string) map[string]string {
	t.Helper()
	log := c.WaitForLog(t, ns, name, container, "envdump: done", time.Minute)
	env, _ := parseEnvdump(log)
	return env
}

// allocations returns the planned and claimed allocations of a pod (nil when absent); a
// malformed annotation fails the test.
func allocations(t testing.TB, p *corev1.Pod) (planned, claimed *device.Allocation) {
	t.Helper()
	for _, x := range []struct {
		key string
		dst **device.Allocation
	}{{device.AnnoPlanned, &planned}, {device.AnnoClaimed, &claimed}} {
		s, ok := p.Annotations[x.key]
		if !ok {
			continue
		}
		a, err := device.DecodeAllocation(s)
		if err != nil {
			t.Fatalf("pod %s/%s: annotation %s: %v\n%s", p.Namespace, p.Name, x.key, err, s)
		}
		*x.dst = &a
	}
	return planned, claimed
}

// uuids lists a container allocation's GPU UUIDs in order.
func uuids(ca *device.ContainerAllocation) []string {
	if ca == nil {
		return nil
	}
	out := make([]string, len(ca.Devices))
	for i, d := range ca.Devices {
		out[i] = d.UUID
	}
	return out
}

// inventory reads and decodes the node's inventory annotation, waiting up to a minute for it.
func (c *Cluster) inventory(t testing.TB) device.Inventory {
	t.Helper()
	var inv device.Inventory
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		s, ok := n.Annotations[device.AnnoInventory]
		if !ok {
			last = fmt.Errorf("no %s annotation (is the device plugin running? kubectl -n %s get pods)", device.AnnoInventory, chartNamespace)
			return false, nil
		}
		inv, last = device.DecodeInventory(s)
		return last == nil && len(inv.GPUs) > 0, nil
	})
	if err != nil {
		t.Fatalf("inventory of node %s: %v", c.NodeName, last)
	}
	return inv
}

// gpuUse is what the pods on the node hold on one GPU.
type gpuUse struct {
	memMiB  int64
	sharers int
	pods    []string
}

// nodeUsage sums, per GPU UUID, the allocations of every non-terminated pod on the node (all
// namespaces, others' pods too): the claimed allocation where present, else the planned one.
func (c *Cluster) nodeUsage(t testing.TB) map[string]*gpuUse {
	t.Helper()
	pods, err := c.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	use := map[string]*gpuUse{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		planned, claimed := allocations(t, p)
		a := claimed
		if a == nil {
			a = planned
		}
		if a == nil || a.Node != c.NodeName {
			continue
		}
		for _, ctr := range a.Containers {
			for _, d := range ctr.Devices {
				u := use[d.UUID]
				if u == nil {
					u = &gpuUse{}
					use[d.UUID] = u
				}
				u.memMiB += d.MemoryMiB
				u.sharers++
				u.pods = append(u.pods, p.Namespace+"/"+p.Name+"["+ctr.Name+"]")
			}
		}
	}
	return use
}

// checkNotOvercommitted fails the test when any GPU holds more MiB than it has (times the
// inventory's memory scaling) or more sharers than the split count.
func checkNotOvercommitted(t testing.TB, inv device.Inventory, use map[string]*gpuUse) {
	t.Helper()
	byUUID := map[string]device.GPU{}
	for _, g := range inv.GPUs {
		byUUID[g.UUID] = g
	}
	for u, x := range use {
		g, ok := byUUID[u]
		if !ok {
			t.Errorf("GPU %s is allocated to %v but is not in the node's inventory", u, x.pods)
			continue
		}
		if capMiB := int64(float64(g.MemoryMiB) * inv.MemoryScaling); x.memMiB > capMiB {
			t.Errorf("GPU %s (index %d): %d MiB allocated, more than its %d MiB: %v", u, g.Index, x.memMiB, capMiB, x.pods)
		}
		if x.sharers > inv.SplitCount {
			t.Errorf("GPU %s (index %d): %d sharers, more than split count %d: %v", u, g.Index, x.sharers, inv.SplitCount, x.pods)
		}
	}
}

// freeMiB returns, per GPU of inv (in inventory order), the MiB not yet allocated by any pod.
func freeMiB(inv device.Inventory, use map[string]*gpuUse) []int64 {
	out := make([]int64, len(inv.GPUs))
	for i, g := range inv.GPUs {
		out[i] = int64(float64(g.MemoryMiB) * inv.MemoryScaling)
		if u := use[g.UUID]; u != nil {
			out[i] -= u.memMiB
		}
	}
	return out
}

// createPods creates pods concurrently (8 at a time) and fails the test on the first error.
func (c *Cluster) createPods(t testing.TB, pods []*corev1.Pod) {
	t.Helper()
	if err := c.createPodsErr(pods); err != nil {
		t.Fatal(err)
	}
}

// createPodsErr creates pods concurrently (8 at a time) and returns the first error (for use
// outside the test's goroutine).
func (c *Cluster) createPodsErr(pods []*corev1.Pod) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	sem := make(chan struct{}, 8)
	for _, p := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func(p *corev1.Pod) {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := c.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				errs <- fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
			}
		}(p)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitAllRunning waits until every pod of ns is Running with all containers started, and
// returns them. A pod in phase Failed fails the test at once (with its description).
func (c *Cluster) waitAllRunning(t testing.TB, ns string, n int, timeout time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var failed *corev1.Pod
	var notRunning []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods, notRunning = l.Items, nil
		for i := range pods {
			p := &pods[i]
			if p.Status.Phase == corev1.PodFailed {
				failed = p
				return true, nil
			}
			if !allStarted(p) {
				notRunning = append(notRunning, p.Name+"("+string(p.Status.Phase)+")")
			}
		}
		return len(pods) == n && len(notRunning) == 0, nil
	})
	if failed != nil {
		t.Fatalf("pod %s/%s failed:\n%s", ns, failed.Name, c.describe(ns, failed.Name, failed))
	}
	if err != nil {
		sort.Strings(notRunning)
		msg := fmt.Sprintf("%d of %d pods in %s not Running after %v: %v", len(notRunning), n, ns, timeout, notRunning)
		if len(notRunning) > 0 {
			name, _, _ := strings.Cut(notRunning[0], "(")
			for i := range pods {
				if pods[i].Name == name {
					msg += "\nfirst of them:\n" + c.describe(ns, name, &pods[i])
				}
			}
		}
		t.Fatal(msg)
	}
	return pods
}

func allStarted(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running == nil {
			return false
		}
	}
	return true
}

// checkOwnLimit asserts that a running GPU pod's container "main" saw exactly its claimed GPUs
// in HAMI_GO_GPU_UUIDS, in PCI bus order, no CUDA_VISIBLE_DEVICES, and HAMi-core's memory limit
// equal to wantMiB for each, and that the claimed and planned allocations name the same GPUs.
// It returns the claimed UUIDs (in the allocation's order).
func (c *Cluster) checkOwnLimit(t testing.TB, p *corev1.Pod, wantMiB int64) []string {
	t.Helper()
	return c.ownLimit(t, p, wantMiB, false)
}

// legacyEnv reports whether env is a GPU container's env of a release before issue 36's
// contract: CUDA_VISIBLE_DEVICES set, to the same list as HAMI_GO_GPU_UUIDS.
func legacyEnv(env map[string]string) bool {
	v := env[envCUDAVisible]
	if v == "<unset>" || v == "" {
		return false
	}
	// A restarted container of a DRA claim the previous release prepared keeps that claim's
	// env, whose UUID list the NRI plugin rewrites to 0..n-1 (pkg/nri namesOwnGPUs).
	ids := make([]string, len(strings.Split(env[envVisible], ",")))
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	return v == env[envVisible] || v == strings.Join(ids, ",")
}

// ownLimit is checkOwnLimit; legacyOK also accepts the env a previous release gave a pod created
// before an upgrade (legacyEnv: its GPUs in the allocation's order in both lists).
func (c *Cluster) ownLimit(t testing.TB, p *corev1.Pod, wantMiB int64, legacyOK bool) []string {
	t.Helper()
	planned, claimed := allocations(t, p)
	if planned == nil || claimed == nil {
		t.Errorf("pod %s/%s: planned=%v claimed=%v; want both annotations", p.Namespace, p.Name, planned != nil, claimed != nil)
		return nil
	}
	cl := claimed.Container("main")
	if cl == nil || len(cl.Devices) == 0 {
		t.Errorf("pod %s/%s: claimed allocation has no container main: %+v", p.Namespace, p.Name, claimed)
		return nil
	}
	env := c.containerEnv(t, p.Namespace, p.Name, "main")
	if legacyOK && legacyEnv(env) {
		if got, want := env[envVisible], strings.Join(uuids(cl), ","); got != want {
			t.Errorf("pod %s/%s (previous release): %s=%q, want the claimed GPUs %q", p.Namespace, p.Name, envVisible, got, want)
		}
	} else {
		checkGPUEnv(t, "pod "+p.Namespace+"/"+p.Name, env, pciOrdered(uuids(cl), c.busIDs(t)), false)
	}
	for i, d := range cl.Devices {
		// Every device asks wantMiB, so position i's limit is wantMiB whatever the order.
		k := fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", i)
		if got, want := env[k], fmt.Sprintf("%dm", wantMiB); got != want {
			t.Errorf("pod %s/%s: %s=%q, want %q (its own request)", p.Namespace, p.Name, k, got, want)
		}
		if d.MemoryMiB != wantMiB {
			t.Errorf("pod %s/%s: claimed %d MiB on %s, want %d", p.Namespace, p.Name, d.MemoryMiB, d.UUID, wantMiB)
		}
	}
	return uuids(cl)
}

// clusterScript runs hack/cluster/<script> with args (HAMI_GO_STATE passed on) and returns
// its combined output; a failure fails the test with that output.
func (c *Cluster) clusterScript(t testing.TB, script string, args ...string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "hack", "cluster", script)
	cmd := exec.Command("bash", append([]string{path}, args...)...)
	cmd.Env = append(os.Environ(), "HAMI_GO_STATE="+c.State)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
	return string(out)
}

// allocatableCount returns the node's allocatable count resource.
func (c *Cluster) allocatableCount(ctx context.Context) (int64, error) {
	n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	q, ok := n.Status.Allocatable[resCount]
	if !ok {
		return 0, nil
	}
	return q.Value(), nil
}

// waitAllocatable waits until the node's allocatable count resource equals want and returns
// how long that took.
func (c *Cluster) waitAllocatable(t testing.TB, want int64, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var last int64
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		v, err := c.allocatableCount(ctx)
		if err != nil {
			return false, nil
		}
		last = v
		return v == want, nil
	})
	if err != nil {
		t.Fatalf("node %s: allocatable %s = %d after %v, want %d (device plugin log: kubectl -n %s logs -l %s=device-plugin; kubelet log: %s/logs/kubelet.log)",
			c.NodeName, resCount, last, timeout, want, chartNamespace, labelComponent, c.State)
	}
	return time.Since(start)
}

// waitBound waits until the pod has spec.nodeName and returns it.
func (c *Cluster) waitBound(t testing.TB, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	return c.WaitForPod(t, ns, name, timeout, "bound", func(p *corev1.Pod) bool { return p.Spec.NodeName != "" })
}

// deleteNow deletes a pod with grace period 0 and waits until the API no longer lists it.
func (c *Cluster) deleteNow(t testing.TB, ns, name string) {
	t.Helper()
	zero := int64(0)
	ctx := context.Background()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s still exists a minute after deletion", ns, name)
	}
}

// requireChart fails the test when one of the chart's components (device-plugin, scheduler,
// webhook; all three when none is named) has no running pod.
//
// These are the device-plugin mode's tests: on a DRA-mode cluster (HAMI_GO_MODE=dra) it skips
// the test, saying so.
func (c *Cluster) requireChart(t testing.TB, components ...string) {
	t.Helper()
	if c.isDRAMode(t) {
		t.Skipf("device-plugin-mode test: the cluster is in DRA mode (DeviceClass %s exists); it runs on plain hack/cluster/up.sh", draClass)
	}
	if len(components) == 0 {
		components = []string{"device-plugin", "scheduler", "webhook"}
	}
	for _, comp := range components {
		l, err := c.Client.CoreV1().Pods(chartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: labelComponent + "=" + comp})
		if err != nil {
			t.Fatalf("list %s pods: %v", comp, err)
		}
		ready := false
		for i := range l.Items {
			if allStarted(&l.Items[i]) {
				ready = true
			}
		}
		if !ready {
			t.Fatalf("no running %s pod in %s (is charts/hami-go installed? hack/cluster/up.sh; logs: %s/logs/helm.log)", comp, chartNamespace, c.State)
		}
	}
}

// logTail is the last n lines of a container's log, or why it could not be read.
func (c *Cluster) logTail(ns, name, container string, n int) string {
	tail := int64(n)
	b, err := c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container, TailLines: &tail}).Do(context.Background()).Raw()
	if err != nil {
		return fmt.Sprintf("(log of %s/%s[%s]: %v)", ns, name, container, err)
	}
	return string(b)
}
