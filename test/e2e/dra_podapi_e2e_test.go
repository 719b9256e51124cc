//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/hami-go/hami-go/pkg/device"
)

// The pod API in DRA mode (issue 14): pods written as for device-plugin mode (nvidia.com/gpu,
// gpumem, gpumem-percentage, gpucores limits, HAMi's annotations); the webhook (--mode=dra)
// turns the limits into ResourceClaims from its ResourceClaimTemplates, stock kube-scheduler
// allocates them and the driver prepares them. They skip on a device-plugin-mode cluster.

// podClaims returns the pod's claims as the webhook wrote them: spec.resourceClaims by name ->
// template, and each container's claim.
func podClaims(t *testing.T, p *corev1.Pod) (templates map[string]string, byContainer map[string]string) {
	t.Helper()
	templates, byContainer = map[string]string{}, map[string]string{}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimTemplateName != nil {
			templates[rc.Name] = *rc.ResourceClaimTemplateName
		}
	}
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, rc := range c.Resources.Claims {
			byContainer[c.Name] = rc.Name
		}
		for n := range c.Resources.Limits {
			if strings.HasPrefix(string(n), "nvidia.com/") {
				t.Errorf("pod %s: container %s still has limit %s", p.Name, c.Name, n)
			}
		}
	}
	return templates, byContainer
}

// draMemoryMiB is the memory capacity (MiB) the driver publishes for the node's first device.
func (c *Cluster) draMemoryMiB(t *testing.T) int64 {
	t.Helper()
	l, err := c.Client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l.Items {
		if s.Spec.Driver != draClass || s.Spec.NodeName == nil || *s.Spec.NodeName != c.NodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			if m, ok := d.Capacity["memory"]; ok {
				return m.Value.Value() >> 20
			}
		}
	}
	t.Fatal("no memory capacity published")
	return 0
}

// TestDRAPodAPIOneSlice: `nvidia.com/gpu: 1, nvidia.com/gpumem: 1000` runs on the default
// scheduler through a claim from the webhook's template, and the container sees
// CUDA_DEVICE_MEMORY_LIMIT_0=1000m; a second pod of the same shape shares the template.
func TestDRAPodAPIOneSlice(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	for _, n := range []string{"one", "same"} {
		c.CreatePod(t, gpuPod(ns, n, gpuLimits{count: 1, memMiB: 1000}))
	}
	var tmpl string
	for _, n := range []string{"one", "same"} {
		p := c.WaitForRunning(t, ns, n, 2*time.Minute)
		if p.Spec.SchedulerName != corev1.DefaultSchedulerName {
			t.Errorf("pod %s: schedulerName %q, want the default scheduler's", n, p.Spec.SchedulerName)
		}
		templates, byC := podClaims(t, p)
		if len(templates) != 1 || byC["main"] == "" {
			t.Fatalf("pod %s: claims %v containers %v", n, templates, byC)
		}
		if tmpl == "" {
			tmpl = templates[byC["main"]]
		} else if templates[byC["main"]] != tmpl {
			t.Errorf("pod %s: template %s, want the shared %s", n, templates[byC["main"]], tmpl)
		}
		env := c.containerEnv(t, ns, n, "main")
		if env[envMemLimit0] != "1000m" {
			t.Errorf("pod %s: %s = %q, want 1000m", n, envMemLimit0, env[envMemLimit0])
		}
		if n == "one" {
			t.Logf("pod %s env:\n%s", n, envLines(env, "CUDA_", "HAMI_GO_"))
		}
	}
	rt, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).Get(context.Background(), tmpl, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Labels["hami-go.io/claim-template"] != "webhook" {
		t.Errorf("template labels %v", rt.Labels)
	}
	t.Logf("template %s: %+v", tmpl, rt.Spec.Spec.Devices.Requests[0].Exactly.Capacity)
}

// TestDRAPodAPIBadQuantities: the one quantity rule refuses what device-plugin mode refuses,
// naming field and value, and creates no template.
func TestDRAPodAPIBadQuantities(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	for _, tc := range []struct {
		res, val, want string
	}{
		{resMemory, "3000M", `spec.containers[main].resources.limits[nvidia.com/gpumem]: 3G (Kubernetes' canonical form; = 3000M = 3000000000) is 3000000000 MiB`},
		{resCores, "150", `spec.containers[main].resources.limits[nvidia.com/gpucores]: 150 is outside 0..100`},
		{"nvidia.com/gpumem-percentage", "0", `spec.containers[main].resources.limits[nvidia.com/gpumem-percentage]: 0 is outside 1..100`},
	} {
		p := gpuPod(ns, "bad", gpuLimits{count: 1})
		p.Spec.Containers[0].Resources.Limits[corev1.ResourceName(tc.res)] = resource.MustParse(tc.val)
		if msg := c.createErr(t, p); !strings.Contains(msg, `admission webhook "`+webhookHook+`" denied the request: `+tc.want) {
			t.Errorf("%s=%s: %q, want %q", tc.res, tc.val, msg, tc.want)
		}
	}
	if l, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("templates after refusals: %v %v", err, l)
	}
}

// TestDRAPodAPIPercentage: `nvidia.com/gpumem-percentage: 25` gets 25 % of the GPU's
// published memory (rounded up to whole MiB, device.PercentOfMiB).
func TestDRAPodAPIPercentage(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	total := c.draMemoryMiB(t)
	p := gpuPod(ns, "pct", gpuLimits{count: 1})
	p.Spec.Containers[0].Resources.Limits["nvidia.com/gpumem-percentage"] = resource.MustParse("25")
	c.CreatePod(t, p)
	c.WaitForRunning(t, ns, "pct", 2*time.Minute)
	env := c.containerEnv(t, ns, "pct", "main")
	if want := fmt.Sprintf("%dm", device.PercentOfMiB(total, 25)); env[envMemLimit0] != want {
		t.Errorf("%s = %q, want %s (25 %% of %d MiB)", envMemLimit0, env[envMemLimit0], want, total)
	}
}

// TestDRAPodAPIModelFilter: use-gputype H100 runs on the fake H100s; use-gputype A100 (none
// here) stays Pending with kube-scheduler's "cannot allocate all claims"; nouse-gputype H100
// likewise.
func TestDRAPodAPIModelFilter(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	for name, anno := range map[string]map[string]string{
		"h100":    {device.AnnoUseGPUType: "H100"},
		"a100":    {device.AnnoUseGPUType: "A100"},
		"no-h100": {device.AnnoNoUseGPUType: "H100"},
	} {
		p := gpuPod(ns, name, gpuLimits{count: 1, memMiB: 1000})
		p.Annotations = anno
		c.CreatePod(t, p)
	}
	c.WaitForRunning(t, ns, "h100", 2*time.Minute)
	for _, n := range []string{"a100", "no-h100"} {
		if msg := c.waitPodUnschedulable(t, ns, n, time.Minute); !strings.Contains(msg, draUnschedulable) {
			t.Errorf("pod %s: %q, want %q", n, msg, draUnschedulable)
		}
	}
}

// TestDRAPodAPITwoGPUs: `nvidia.com/gpu: 2, gpumem: 2000` is one request for two distinct GPUs
// with 2000 MiB each.
func TestDRAPodAPITwoGPUs(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	c.CreatePod(t, gpuPod(ns, "two", gpuLimits{count: 2, memMiB: 2000}))
	c.WaitForRunning(t, ns, "two", 2*time.Minute)
	env := c.containerEnv(t, ns, "two", "main")
	uuids := strings.Split(env[envVisible], ",")
	if len(uuids) != 2 || uuids[0] == uuids[1] {
		t.Errorf("%s = %q, want two distinct GPUs", envVisible, env[envVisible])
	} else {
		checkGPUEnv(t, "pod two", env, pciOrdered(uuids, draBusIDs(c.draGPUs(t))), false)
	}
	for _, k := range []string{"CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_1"} {
		if env[k] != "2000m" {
			t.Errorf("%s = %q, want 2000m", k, env[k])
		}
	}
}

// TestDRAPodAPIWebhookDown (case C38 in DRA mode): with the webhook scaled to 0, a GPU pod is
// refused with the API server's message naming gpu-pods.hami-go.io (it would otherwise reach
// the kubelet with extended resources no device plugin serves), and pods without GPUs are
// created.
func TestDRAPodAPIWebhookDown(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	old := c.scaleWebhook(t, 0)
	t.Cleanup(func() { c.scaleWebhook(t, old) })
	if msg := c.createErr(t, gpuPod(ns, "plain-while-down", gpuLimits{})); msg != "" {
		t.Errorf("plain pod refused while the webhook is down: %s", msg)
	}
	msg := c.createErr(t, gpuPod(ns, "gpu-while-down", gpuLimits{count: 1, memMiB: 1000}))
	if want := `failed calling webhook "` + webhookHook + `"`; !strings.Contains(msg, want) {
		t.Errorf("GPU pod while the webhook is down: %q, want %q", msg, want)
	}
	t.Logf("a GPU pod while the webhook is down: %s", msg)
}

// TestDRAPodAPIDryRun: a server-side dry run (kubectl --dry-run=server) is admitted with the
// claims but creates no ResourceClaimTemplate (sideEffects NoneOnDryRun).
func TestDRAPodAPIDryRun(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	p, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), gpuPod(ns, "dry", gpuLimits{count: 1, memMiB: 3000}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if templates, byC := podClaims(t, p); len(templates) != 1 || byC["main"] == "" {
		t.Errorf("dry-run pod: claims %v containers %v", templates, byC)
	}
	if l, err := c.Client.ResourceV1().ResourceClaimTemplates(ns).List(context.Background(), metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("templates after a dry run: %v %d", err, len(l.Items))
	}
}

// TestDRAPodAPIInitContainer (case C03): a classic init container asking what the app container
// asks shares its claim (one claim for the pod) and sees the same limit.
func TestDRAPodAPIInitContainer(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	p := gpuPod(ns, "init", gpuLimits{count: 1, memMiB: 1500})
	ini := *p.Spec.Containers[0].DeepCopy()
	ini.Name = "init"
	ini.Command = []string{"envdump", "--no-wait"} // an init container must end
	p.Spec.InitContainers = []corev1.Container{ini}
	c.CreatePod(t, p)
	got := c.WaitForRunning(t, ns, "init", 2*time.Minute)
	templates, byC := podClaims(t, got)
	if len(templates) != 1 || byC["init"] != byC["main"] {
		t.Errorf("claims %v containers %v, want one claim shared by init and main", templates, byC)
	}
	for _, ctr := range []string{"init", "main"} {
		if env := c.containerEnv(t, ns, "init", ctr); env[envMemLimit0] != "1500m" {
			t.Errorf("container %s: %s = %q, want 1500m", ctr, envMemLimit0, env[envMemLimit0])
		}
	}
}

// TestDRAPodAPIKubeRay: the real KubeRay operator makes a head and a worker (1 GPU, 8000 MiB);
// in DRA mode the worker's limits become a claim and it still gets --num-gpus=1 and the
// gpu_memory_mib resource (the `ray` stand-in registers GPU=1 gpu_memory_mib=8000), the head
// --num-gpus=0.
func TestDRAPodAPIKubeRay(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	createRayCluster(t, c, ns, rayCluster("rc", 1, 8000))
	ctx := context.Background()
	pods := c.waitRayPods(t, ns, "rc", 2)
	for _, p := range pods {
		kind := p.Labels["ray.io/node-type"]
		ctr := p.Spec.Containers[0]
		line := startLine(ctr)
		m := registeredRE.FindStringSubmatch(c.rayLog(ctx, ns, p.Name, ctr.Name))
		if m == nil {
			t.Errorf("%s %s: no registered line; ray start line:\n%s", kind, p.Name, line)
			continue
		}
		t.Logf("%s %s: %s", kind, p.Name, m[0])
		templates, byC := podClaims(t, &p)
		switch kind {
		case "head":
			if !strings.Contains(line, "--num-gpus=0") || m[2] != "0" || len(templates) != 0 {
				t.Errorf("head: line %q registered %q claims %v", line, m[0], templates)
			}
		case "worker":
			if !strings.Contains(line, "--num-gpus=1") || m[2] != "1" || !strings.Contains(m[0], " gpu_memory_mib=8000 ") {
				t.Errorf("worker: line %q registered %q", line, m[0])
			}
			if len(templates) != 1 || byC[ctr.Name] == "" {
				t.Errorf("worker: claims %v containers %v, want one claim", templates, byC)
			}
		}
	}
}

// TestDRAPodAPIDeletedPodFreesShare: through the pod API, a pod holding all of one GPU's memory
// (pinned with use-gpuuuid) keeps a second one Pending; deleting the first frees the share (its
// claim, made from the webhook's template, goes with the pod) and the second runs on that GPU.
func TestDRAPodAPIDeletedPodFreesShare(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	gpu := c.draGPUs(t)["gpu-3"]
	total := c.draMemoryMiB(t)
	pinned := func(name string) *corev1.Pod {
		p := gpuPod(ns, name, gpuLimits{count: 1, memMiB: total})
		p.Annotations = map[string]string{device.AnnoUseGPUUUID: gpu.uuid}
		return p
	}
	c.CreatePod(t, pinned("first"))
	c.WaitForRunning(t, ns, "first", 2*time.Minute)
	c.CreatePod(t, pinned("second"))
	if msg := c.waitPodUnschedulable(t, ns, "second", time.Minute); !strings.Contains(msg, draUnschedulable) {
		t.Errorf("second: %q, want %q", msg, draUnschedulable)
	}
	c.deleteNow(t, ns, "first")
	c.WaitForRunning(t, ns, "second", 2*time.Minute)
	env := c.containerEnv(t, ns, "second", "main")
	if env[envMemLimit0] != fmt.Sprintf("%dm", total) {
		t.Errorf("second: %s=%q, want %dm", envMemLimit0, env[envMemLimit0], total)
	}
	checkGPUEnv(t, "second", env, gpu.uuid, false)
}

// waitRayPods waits until RayCluster name in ns has exactly n pods, all started, and returns
// them (the head first is not promised).
func (c *Cluster) waitRayPods(t *testing.T, ns, name string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=" + name})
		if err != nil {
			return false, nil
		}
		pods = l.Items
		running := 0
		for i := range pods {
			if allStarted(&pods[i]) && pods[i].DeletionTimestamp == nil {
				running++
			}
		}
		return running == n && len(pods) == n, nil
	})
	if err != nil {
		var b strings.Builder
		for i := range pods {
			b.WriteString(c.describe(ns, pods[i].Name, &pods[i]) + "\n")
		}
		t.Fatalf("RayCluster %s: want %d running pods, have:\n%s", name, n, b.String())
	}
	return pods
}

// rayWorkers returns, per worker pod of pods, the devices its one claim was allocated
// ("pool/device") and what the `ray` stand-in registered (GPU count, gpu_memory_mib).
func (c *Cluster) rayWorkers(t *testing.T, ns string, pods []corev1.Pod) map[string]rayWorker {
	t.Helper()
	out := map[string]rayWorker{}
	for i := range pods {
		p := &pods[i]
		if p.Labels["ray.io/node-type"] != "worker" {
			continue
		}
		ctr := p.Spec.Containers[0]
		w := rayWorker{}
		if m := registeredRE.FindStringSubmatch(c.rayLog(context.Background(), ns, p.Name, ctr.Name)); m != nil {
			w.registered = m[0]
		}
		res := c.podAllocation(t, p)
		w.device = res.Pool + "/" + res.Device
		if m, ok := res.ConsumedCapacity["memory"]; ok {
			w.memMiB = m.Value() >> 20
		}
		out[p.Name] = w
	}
	return out
}

// rayWorker is one KubeRay worker as rayWorkers sees it.
type rayWorker struct {
	device     string // the claim's allocated device, pool/device
	memMiB     int64  // the memory its claim consumed, MiB
	registered string // the ray stand-in's "registered" line
}

// TestDRAPodAPIKubeRaySeed: the seed scenario in DRA mode from the pod API alone (the demo's
// three steps): two whole-GPU workers get a GPU each; two sliced workers (20000 MiB) share one
// GPU, and scaling them 2 -> 4 puts the new ones on the same GPU (kube-scheduler's first fit;
// a second GPU when its in-flight double count struck); every worker's ray registers GPU=1 and
// its gpu_memory_mib.
func TestDRAPodAPIKubeRaySeed(t *testing.T) {
	c := draCluster(t)
	ns := draNamespace(t, c)
	c.waitNoAllocatedClaims(t, time.Minute)
	total := c.draMemoryMiB(t)
	createRayCluster(t, c, ns, rayCluster("whole", 2, 0))
	whole := c.rayWorkers(t, ns, c.waitRayPods(t, ns, "whole", 3))
	for name, w := range whole {
		if w.memMiB != total || !strings.Contains(w.registered, " GPU=1 ") || !strings.Contains(w.registered, fmt.Sprintf(" gpu_memory_mib=%d ", total)) {
			t.Errorf("whole-GPU worker %s: claim %s consumes %d MiB (want %d), registered %q", name, w.device, w.memMiB, total, w.registered)
		}
	}
	if len(whole) != 2 || len(devsOf(whole)) != 2 {
		t.Errorf("whole-GPU workers %v: want 2 on 2 distinct GPUs", whole)
	}

	createRayCluster(t, c, ns, rayCluster("slices", 2, 20000))
	c.waitRayPods(t, ns, "slices", 3)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	patch := []byte(`[{"op":"replace","path":"/spec/workerGroupSpecs/0/replicas","value":4}]`)
	if _, err := dyn.Resource(rayClusterGVR).Namespace(ns).Patch(context.Background(), "slices", types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("scale RayCluster slices to 4 workers: %v", err)
	}
	sliced := c.rayWorkers(t, ns, c.waitRayPods(t, ns, "slices", 5))
	wholeGPUs := devsOf(whole)
	for name, w := range sliced {
		if wholeGPUs[w.device] {
			t.Errorf("sliced worker %s on %s, a whole-GPU worker's GPU", name, w.device)
		}
		if w.memMiB != 20000 || !strings.Contains(w.registered, " GPU=1 ") || !strings.Contains(w.registered, " gpu_memory_mib=20000 ") {
			t.Errorf("sliced worker %s: claim %s consumes %d MiB (want 20000), registered %q", name, w.device, w.memMiB, w.registered)
		}
	}
	// First fit puts all four on one GPU (4 x 20000 MiB fit 81920), unless kube-scheduler's
	// in-flight double count (docs/dra.md "Packing under concurrency") made that GPU look full
	// while worker 3's claim was in PreBind: worker 4 then takes the next GPU. One GPU more is
	// that upstream race; two more is not.
	switch n := len(devsOf(sliced)); {
	case len(sliced) != 4 || n > 2:
		t.Errorf("sliced workers %v: want 4 sharing one GPU", sliced)
	case n == 2:
		t.Logf("sliced workers on 2 GPUs: kube-scheduler's in-flight double count (upstream; docs/dra.md) moved one")
	}
	for name, w := range sliced {
		t.Logf("sliced worker %s: %s, %d MiB; %s", name, w.device, w.memMiB, w.registered)
	}
}

// waitNoAllocatedClaims waits until no ResourceClaim in the cluster holds an allocation: an
// earlier test's claims go after its pods (the resource-claim controller deletes them), and one
// still allocated would take room on a GPU that first-fit placement here expects empty. It logs
// what it waited for.
func (c *Cluster) waitNoAllocatedClaims(t *testing.T, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	var left []string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = left[:0]
		for _, rc := range l.Items {
			if rc.Status.Allocation != nil {
				left = append(left, rc.Namespace+"/"+rc.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		t.Logf("claims still allocated after %v: %v; placing anyway", timeout, left)
		return
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %v for earlier tests' claims to go", d.Round(100*time.Millisecond))
	}
}

// devsOf is the set of devices the workers hold.
func devsOf(ws map[string]rayWorker) map[string]bool {
	out := map[string]bool{}
	for _, w := range ws {
		out[w.device] = true
	}
	return out
}
