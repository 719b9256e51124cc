package webhook

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hami-go/hami-go/pkg/device"
)

// quotaNS is a Quotas where the listed namespaces cap GPU memory with a quota named "gpu".
type quotaNS map[string]bool

func (q quotaNS) Quota(ns string, key corev1.ResourceName) (string, bool) {
	return "gpu", q[ns] && key == device.QuotaResourceGPUMemory
}

// quotaKeys is a Quotas where namespace team-a has a quota named "q" on the listed keys.
type quotaKeys []corev1.ResourceName

func (q quotaKeys) Quota(ns string, key corev1.ResourceName) (string, bool) {
	return "q", ns == "team-a" && slices.Contains(q, key)
}

// gpuMem returns the figure of device.ResourceGPUMemory a container got (figureOf).
func gpuMem(t *testing.T, p corev1.Pod, name string) string {
	t.Helper()
	return figureOf(t, p, name, device.ResourceGPUMemory)
}

// figureOf returns the figure of res a container got in limits and requests ("" when absent);
// it fails when the two differ (extended resources need requests == limits).
func figureOf(t *testing.T, p corev1.Pod, name string, res corev1.ResourceName) string {
	t.Helper()
	for _, l := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range l {
			if c.Name != name {
				continue
			}
			lq, lok := c.Resources.Limits[res]
			rq, rok := c.Resources.Requests[res]
			if lok != rok || lq.Cmp(rq) != 0 {
				t.Fatalf("container %s: %s limit %v (%v) != request %v (%v)", name, res, lq.String(), lok, rq.String(), rok)
			}
			if !lok {
				return ""
			}
			return strconv.FormatInt(lq.Value(), 10) // MiB; the API's canonical form of 60000 is "60k"
		}
	}
	t.Fatalf("no container %s", name)
	return ""
}

// case C44: the webhook writes each GPU container's GPUs × MiB per GPU, in MiB, into limits and requests,
// in device-plugin mode; Kubernetes' own rule then adds init, sidecar and app up (issue 25).
func TestGPUMemoryFigurePerContainer(t *testing.T) {
	side := func(c corev1.Container) corev1.Container { return sidecar(c) }
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		quota bool
		want  map[string]string // container -> figure ("" = none)
		deny  string
	}{
		{name: "2 GPUs x 30000 MiB: 60000", pod: newPod(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "30000")),
			want: map[string]string{"main": "60000"}},
		{name: "16Gi per GPU x 3: 49152", pod: newPod(ctr("main", "nvidia.com/gpu", "3", "nvidia.com/gpumem", "16Gi")),
			want: map[string]string{"main": "49152"}},
		{name: "memory only: count defaults to 1", pod: newPod(withRequests(ctr("main", "nvidia.com/gpumem", "3000"))),
			want: map[string]string{"main": "3000"}},
		{name: "init, sidecar and app each get their own; a CPU container none", pod: func() *corev1.Pod {
			p := newPod(ctr("app", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "8192"), ctr("cpu", "cpu", "1"))
			p.Spec.InitContainers = []corev1.Container{
				side(ctr("side", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "8192")),
				ctr("init", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "9831"),
			}
			return p
		}(), want: map[string]string{"app": "8192", "side": "8192", "init": "19662", "cpu": ""}},
		{name: "percentage without a quota: no figure", pod: newPod(ctr("main", "nvidia.com/gpumem-percentage", "50")),
			want: map[string]string{"main": ""}},
		{name: "whole GPU without a quota: no figure", pod: newPod(ctr("main", "nvidia.com/gpu", "1")),
			want: map[string]string{"main": ""}},
		{name: "percentage under a quota: refused, naming field, value and quota", pod: newPod(ctr("main", "nvidia.com/gpumem-percentage", "50")), quota: true,
			deny: "spec.containers[main].resources.limits[nvidia.com/gpumem-percentage]: 50: namespace team-a caps GPU memory in MiB (ResourceQuota gpu, requests.hami-go.io/gpu-memory), and a share of each GPU's memory has no MiB figure before a GPU is chosen; ask in MiB per GPU with nvidia.com/gpumem (e.g. nvidia.com/gpumem: 20000)"},
		{name: "whole GPU under a quota: refused, naming the count", pod: newPod(ctr("main", "nvidia.com/gpu", "2")), quota: true,
			deny: "spec.containers[main].resources.limits[nvidia.com/gpu]: 2 with no nvidia.com/gpumem (a whole GPU's memory): namespace team-a caps GPU memory"},
		{name: "cores only under a quota: refused (a whole GPU's memory)", pod: func() *corev1.Pod {
			p := newPod(ctr("app"))
			p.Spec.InitContainers = []corev1.Container{ctr("warm", "nvidia.com/gpucores", "30")}
			return p
		}(), quota: true,
			deny: "spec.initContainers[warm].resources.limits[nvidia.com/gpumem]: not set (each GPU's whole memory): namespace team-a caps GPU memory"},
		{name: "MiB under a quota: admitted", pod: newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "30000")), quota: true,
			want: map[string]string{"main": "30000"}},
		{name: "hostile: a GPU container's own figure is overwritten", pod: newPod(withRequests(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "30000", device.ResourceGPUMemory, "1"))), quota: true,
			want: map[string]string{"main": "60000"}},
		{name: "hostile: a figure on a CPU container of a GPU pod is removed", pod: newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000"), withRequests(ctr("cpu", "cpu", "1", device.ResourceGPUMemory, "80000"))),
			want: map[string]string{"main": "1000", "cpu": ""}},
		{name: "hostile: a figure on a pod without GPUs is removed", pod: newPod(withRequests(ctr("main", "cpu", "1", device.ResourceGPUMemory, "80000"))),
			want: map[string]string{"main": ""}},
		{name: "hostile: a percentage pod's own figure is removed, not trusted", pod: newPod(withRequests(ctr("main", "nvidia.com/gpumem-percentage", "50", device.ResourceGPUMemory, "1"))),
			want: map[string]string{"main": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, _ := testHandlers(nil)
			if tc.quota {
				h.SetQuotas(quotaNS{"team-a": true})
			} else {
				h.SetQuotas(quotaNS{"other": true})
			}
			r := run(t, h, admissionv1.Create, "team-a", tc.pod)
			p, ok := r.admitted(t, tc.deny)
			if !ok {
				return
			}
			for c, want := range tc.want {
				if got := gpuMem(t, p, c); got != want {
					t.Errorf("container %s: %s %q, want %q", c, device.ResourceGPUMemory, got, want)
				}
			}
		})
	}
}

// Issue 37 item 4: what a container holds is counted or refused. GPU compute is written as
// hami-go.io/gpu-cores (GPUs × cores per GPU, 100 per GPU when exclusive) in both modes; an
// exclusive container holds its GPUs' whole memory, so under a memory quota it is refused
// whatever MiB it states (before: cores 100 with gpumem 1 held a GPU for 1 MiB of quota), and
// under a compute quota a container without a cores limit is refused.
// Case C59.
func TestGPUCoresFigureAndQuotaEvasion(t *testing.T) {
	mem, cores := corev1.ResourceName(device.QuotaResourceGPUMemory), corev1.ResourceName(device.QuotaResourceGPUCores)
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		quota  quotaKeys
		dra    bool
		mem    string
		cores  string
		deny   string
		noDeny bool
	}{
		{name: "2 GPUs x 30 cores: 60", pod: newPod(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "1000", "nvidia.com/gpucores", "30")),
			mem: "2000", cores: "60"},
		{name: "DRA mode too", dra: true, pod: newPod(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "1000", "nvidia.com/gpucores", "30")),
			mem: "2000", cores: "60"},
		{name: "exclusive on 2 GPUs: 200 cores", pod: newPod(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "1", "nvidia.com/gpucores", "100")),
			mem: "2", cores: "200"},
		{name: "no cores limit: no figure", pod: newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000")),
			mem: "1000", cores: ""},
		{name: "exclusive with gpumem 1 under a memory quota: refused", quota: quotaKeys{mem},
			pod:  newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1", "nvidia.com/gpucores", "100")),
			deny: "spec.containers[main].resources.limits[nvidia.com/gpucores]: 100 (an exclusive GPU, whose whole memory it holds whatever nvidia.com/gpumem says): namespace team-a caps GPU memory in MiB (ResourceQuota q, requests.hami-go.io/gpu-memory)"},
		{name: "exclusive in DRA mode under a memory quota: refused", quota: quotaKeys{mem}, dra: true,
			pod:  newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1", "nvidia.com/gpucores", "100")),
			deny: "(an exclusive GPU, whose whole memory it holds"},
		{name: "exclusive under a compute quota only: counted 100", quota: quotaKeys{cores},
			pod: newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1", "nvidia.com/gpucores", "100")),
			mem: "1", cores: "100"},
		{name: "no cores limit under a compute quota: refused", quota: quotaKeys{cores},
			pod:  newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000")),
			deny: "spec.containers[main].resources.limits[nvidia.com/gpucores]: not set (no compute limit: every SM of each GPU): namespace team-a caps GPU compute in percent of a GPU (ResourceQuota q, requests.hami-go.io/gpu-cores)"},
		{name: "an init container without cores under a compute quota: refused", quota: quotaKeys{cores},
			pod: func() *corev1.Pod {
				p := newPod(ctr("app", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000", "nvidia.com/gpucores", "10"))
				p.Spec.InitContainers = []corev1.Container{ctr("warm", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000")}
				return p
			}(),
			deny: "spec.initContainers[warm].resources.limits[nvidia.com/gpucores]: not set"},
		{name: "hostile: the pod's own figure is overwritten", quota: quotaKeys{cores},
			pod: newPod(withRequests(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "1000", "nvidia.com/gpucores", "50", device.ResourceGPUCores, "1"))),
			mem: "2000", cores: "100"},
		{name: "hostile: a figure on a pod without GPUs is removed", pod: newPod(withRequests(ctr("main", "cpu", "1", device.ResourceGPUCores, "400"))),
			mem: "", cores: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, _ := testHandlers(nil)
			if tc.dra {
				h = newDRAEnv(t, defaultFleet()...).h
			}
			h.SetQuotas(tc.quota)
			r := run(t, h, admissionv1.Create, "team-a", tc.pod)
			p, ok := r.admitted(t, tc.deny)
			if !ok {
				return
			}
			if got := figureOf(t, p, "main", device.ResourceGPUMemory); got != tc.mem {
				t.Errorf("%s %q, want %q", device.ResourceGPUMemory, got, tc.mem)
			}
			if got := figureOf(t, p, "main", device.ResourceGPUCores); got != tc.cores {
				t.Errorf("%s %q, want %q", device.ResourceGPUCores, got, tc.cores)
			}
		})
	}
}

// DRA mode: the limits move into claims, the figure stays in requests and limits; a classic
// init container with a claim of its own holds it for the pod's life, so the first app
// container's figure carries it too; one sharing an app container's claim adds nothing.
func TestDRAGPUMemoryFigure(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want map[string]string
	}{
		{"2 GPUs x 30000 MiB", newPod(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "30000")), map[string]string{"main": "60000"}},
		{"init sharing the app's claim adds nothing", func() *corev1.Pod {
			p := newPod(ctr("app", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "4000"))
			p.Spec.InitContainers = []corev1.Container{ctr("init", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "4000")}
			return p
		}(), map[string]string{"app": "4000", "init": "4000"}},
		{"init with its own claim: the app container carries it too", func() *corev1.Pod {
			p := newPod(ctr("app", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "4000"), ctr("cpu", "cpu", "1"))
			p.Spec.InitContainers = []corev1.Container{ctr("init", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "10000")}
			return p
		}(), map[string]string{"app": "24000", "init": "20000", "cpu": ""}},
		{"init-only GPU pod: the first app container carries the claim", func() *corev1.Pod {
			p := newPod(ctr("app", "cpu", "1"))
			p.Spec.InitContainers = []corev1.Container{ctr("init", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "5000")}
			return p
		}(), map[string]string{"app": "5000", "init": "5000"}},
		{"hostile preset overwritten", newPod(withRequests(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "30000", device.ResourceGPUMemory, "1"))), map[string]string{"main": "30000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDRAEnv(t, defaultFleet()...)
			r := run(t, e.h, admissionv1.Create, "team-a", tc.pod)
			if !r.resp.Allowed {
				t.Fatalf("denied: %s", r.resp.Result.Message)
			}
			p := r.pod(t)
			for c, want := range tc.want {
				if got := gpuMem(t, p, c); got != want {
					t.Errorf("container %s: %s %q, want %q", c, device.ResourceGPUMemory, got, want)
				}
			}
			for _, c := range p.Spec.Containers {
				if _, ok := c.Resources.Limits["nvidia.com/gpu"]; ok {
					t.Errorf("container %s keeps nvidia.com/gpu in DRA mode", c.Name)
				}
			}
			if len(p.Spec.ResourceClaims) == 0 {
				t.Errorf("no resourceClaims")
			}
		})
	}
	t.Run("percentage under a quota: refused", func(t *testing.T) {
		e := newDRAEnv(t, defaultFleet()...)
		e.h.SetQuotas(quotaNS{"team-a": true})
		r := run(t, e.h, admissionv1.Create, "team-a", newPod(ctr("main", "nvidia.com/gpumem-percentage", "25")))
		want := "spec.containers[main].resources.limits[nvidia.com/gpumem-percentage]: 25: namespace team-a caps GPU memory in MiB"
		if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, want) {
			t.Fatalf("allowed %v %q, want denial %q", r.resp.Allowed, r.resp.Result.Message, want)
		}
	})
}

// QuotaCache finds a ResourceQuota with requests.hami-go.io/gpu-memory in its namespace only.
func TestQuotaCache(t *testing.T) {
	rq := func(ns, name, res string) *corev1.ResourceQuota {
		return &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceName(res): q("40000")}}}
	}
	c := NewQuotaCache(fake.NewClientset(rq("a", "z-gpu", device.QuotaResourceGPUMemory), rq("a", "b-gpu", device.QuotaResourceGPUMemory), rq("b", "cpu", "requests.cpu")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Start(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns   string
		name string
		ok   bool
	}{{"a", "b-gpu", true}, {"b", "", false}, {"c", "", false}} {
		if name, ok := c.Quota(tc.ns, device.QuotaResourceGPUMemory); name != tc.name || ok != tc.ok {
			t.Errorf("namespace %s: %q %v, want %q %v", tc.ns, name, ok, tc.name, tc.ok)
		}
	}
}
