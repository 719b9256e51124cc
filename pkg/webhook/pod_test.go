package webhook

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

func privileged(c corev1.Container) corev1.Container {
	t := true
	c.SecurityContext = &corev1.SecurityContext{Privileged: &t}
	return c
}

func sidecar(c corev1.Container) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

func TestPodAdmission(t *testing.T) {
	gpu := func() corev1.Container { return ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "3000") }
	type tc struct {
		name    string
		pod     *corev1.Pod
		ns      string
		cfg     func(*Config)
		deny    string   // substring of the denial; "" = allowed
		paths   []string // exact patch operations; nil = no patch
		check   func(t *testing.T, p corev1.Pod)
		warning string
	}
	cases := []tc{
		// case C27: who gets our scheduler.
		{name: "C27 GPU pod with default-scheduler gets ours, nothing else (but the GPU-memory figure)", pod: newPod(gpu()),
			paths: []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests", "replace /spec/schedulerName"},
			check: func(t *testing.T, p corev1.Pod) {
				if p.Spec.SchedulerName != "hami-go-scheduler" {
					t.Errorf("schedulerName %q", p.Spec.SchedulerName)
				}
			}},
		{name: "C27 GPU pod without schedulerName gets ours", pod: func() *corev1.Pod { p := newPod(gpu()); p.Spec.SchedulerName = ""; return p }(),
			paths: []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests", "add /spec/schedulerName"}},
		{name: "C27 third-party scheduler unchanged, with a warning", pod: func() *corev1.Pod { p := newPod(gpu()); p.Spec.SchedulerName = "volcano"; return p }(),
			paths:   []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests"},
			warning: `spec.schedulerName: "volcano" is kept; hami-go's device plugin gives GPU slices only to pods placed by hami-go-scheduler`},
		{name: "C27 our own scheduler: only the GPU-memory figure, no warning", pod: func() *corev1.Pod { p := newPod(gpu()); p.Spec.SchedulerName = "hami-go-scheduler"; return p }(),
			paths: []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests"},
			check: func(t *testing.T, p corev1.Pod) {}},
		{name: "C27 --scheduler-name is what is set", pod: newPod(gpu()), cfg: func(c *Config) { c.SchedulerName = "my-gpu-scheduler" },
			paths: []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests", "replace /spec/schedulerName"},
			check: func(t *testing.T, p corev1.Pod) {
				if p.Spec.SchedulerName != "my-gpu-scheduler" {
					t.Errorf("schedulerName %q", p.Spec.SchedulerName)
				}
			}},
		{name: "C27 preset nodeName denied", pod: func() *corev1.Pod { p := newPod(gpu()); p.Spec.NodeName = "node-1"; return p }(),
			deny: `spec.nodeName: preset to "node-1"; a pod that uses GPU slices must be placed by hami-go-scheduler, which picks its GPUs (remove spec.nodeName and pin the node with a nodeSelector, e.g. kubernetes.io/hostname: node-1)`},
		{name: "C27 non-GPU pod: no patch", pod: newPod(ctr("main", "cpu", "1"))},
		{name: "C27 non-GPU pod with preset nodeName: no patch", pod: func() *corev1.Pod { p := newPod(ctr("main")); p.Spec.NodeName = "node-1"; return p }()},
		{name: "C27 opted-out label: no patch", pod: func() *corev1.Pod {
			p := newPod(ctr("main", "nvidia.com/gpumem", "3000"))
			p.Labels = map[string]string{device.LabelOptOut: "true"}
			p.Spec.NodeName = "node-1"
			return p
		}()},
		{name: "C27 own namespace: no patch", pod: newPod(ctr("main", "nvidia.com/gpumem", "3000")), ns: "hami-go-system"},

		// Count default.
		{name: "only memory: count 1 in limits and requests", pod: newPod(withRequests(ctr("main", "nvidia.com/gpumem", "3000"))),
			paths: []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/limits/nvidia.com~1gpu", "add /spec/containers/0/resources/requests/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests/nvidia.com~1gpu", "replace /spec/schedulerName"},
			check: func(t *testing.T, p corev1.Pod) {
				l, r := p.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"], p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]
				if l.String() != "1" || r.String() != "1" {
					t.Errorf("count limit %s request %s", l.String(), r.String())
				}
			}},
		{name: "only cores: count 1, and its compute figure (1 GPU x 30%)", pod: newPod(ctr("main", "nvidia.com/gpucores", "30")),
			paths: []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-cores", "add /spec/containers/0/resources/limits/nvidia.com~1gpu", "add /spec/containers/0/resources/requests", "replace /spec/schedulerName"}},
		{name: "count given: not touched", pod: newPod(ctr("main", "nvidia.com/gpu", "2", "nvidia.com/gpumem-percentage", "50")),
			paths: []string{"replace /spec/schedulerName"}},

		// case C26: init-only GPU request.
		{name: "C26 GPU only in a classic init container", pod: func() *corev1.Pod {
			p := newPod(ctr("app", "cpu", "1"))
			p.Spec.InitContainers = []corev1.Container{ctr("warmup", "nvidia.com/gpumem", "4096")}
			return p
		}(), paths: []string{"add /spec/initContainers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/initContainers/0/resources/limits/nvidia.com~1gpu", "add /spec/initContainers/0/resources/requests", "replace /spec/schedulerName"}},
		{name: "C26 init container validated too", pod: func() *corev1.Pod {
			p := newPod(ctr("app"))
			p.Spec.InitContainers = []corev1.Container{ctr("warmup", "nvidia.com/gpumem", "0.5")}
			return p
		}(), deny: "spec.initContainers[warmup].resources.limits[nvidia.com/gpumem]: 500m (Kubernetes' canonical form; = 0.5) is not a whole number of MiB"},

		// case C25: one privileged rule for init, sidecar and app containers.
		{name: "C25 privileged sidecar next to a GPU container", pod: func() *corev1.Pod {
			p := newPod(gpu())
			p.Spec.InitContainers = []corev1.Container{sidecar(privileged(ctr("mesh")))}
			return p
		}(), deny: "spec.initContainers[mesh].securityContext.privileged: true; a privileged container sees every GPU"},
		{name: "C25 privileged classic init container", pod: func() *corev1.Pod {
			p := newPod(gpu())
			p.Spec.InitContainers = []corev1.Container{privileged(ctr("setup"))}
			return p
		}(), deny: "spec.initContainers[setup].securityContext.privileged"},
		{name: "C25 privileged GPU app container", pod: newPod(privileged(gpu())), deny: "spec.containers[main].securityContext.privileged"},
		{name: "C25 privileged non-GPU container beside a GPU one", pod: newPod(gpu(), privileged(ctr("agent"))), deny: "spec.containers[agent].securityContext.privileged"},
		{name: "C25 ignore: admitted untouched, with a warning", pod: newPod(privileged(ctr("main", "nvidia.com/gpumem", "3000"))),
			cfg: func(c *Config) { c.Privileged = PrivilegedIgnore }, warning: "leaves this GPU pod untouched (webhook --privileged=ignore)"},
		{name: "C25 privileged pod without GPU: not ours", pod: newPod(privileged(ctr("main")))},

		// Validation: every quantity, percentage, policy name and annotation (C07, C08).
		{name: "C07 fractional memory", pod: newPod(ctr("main", "nvidia.com/gpumem", "0.5")), deny: "spec.containers[main].resources.limits[nvidia.com/gpumem]: 500m (Kubernetes' canonical form; = 0.5) is not a whole number of MiB"},
		{name: "C07 3000M", pod: newPod(ctr("main", "nvidia.com/gpumem", "3000M")), deny: "spec.containers[main].resources.limits[nvidia.com/gpumem]: 3G (Kubernetes' canonical form; = 3000M = 3000000000) is 3000000000 MiB, more than any GPU has (at most 4194304 MiB); did you mean"},
		{name: "C07 negative memory", pod: newPod(ctr("main", "nvidia.com/gpumem", "-1")), deny: "-1 is not a positive amount of GPU memory"},
		{name: "C07 16Gi accepted", pod: newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "16Gi")), paths: []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests", "replace /spec/schedulerName"},
			check: func(t *testing.T, p corev1.Pod) {
				if q := p.Spec.Containers[0].Resources.Limits[device.ResourceGPUMemory]; q.String() != "16384" {
					t.Errorf("%s %s, want 16384 (MiB)", device.ResourceGPUMemory, q.String())
				}
			}},
		{name: "C08 percentage 0 rejected", pod: newPod(ctr("main", "nvidia.com/gpumem-percentage", "0")), deny: "spec.containers[main].resources.limits[nvidia.com/gpumem-percentage]: 0 is outside 1..100"},
		{name: "C08 percentage 101", pod: newPod(ctr("main", "nvidia.com/gpumem-percentage", "101")), deny: "101 is outside 1..100"},
		{name: "C08 fractional percentage", pod: newPod(ctr("main", "nvidia.com/gpumem-percentage", "12.5")), deny: "12500m (Kubernetes' canonical form; = 12.5) is not a whole percentage"},
		{name: "cores 150", pod: newPod(ctr("main", "nvidia.com/gpucores", "150")), deny: "spec.containers[main].resources.limits[nvidia.com/gpucores]: 150 is outside 0..100"},
		{name: "fractional count", pod: newPod(ctr("main", "nvidia.com/gpu", "500m")), deny: "spec.containers[main].resources.limits[nvidia.com/gpu]: 500m (Kubernetes' canonical form; = 0.5) is not a whole number of GPUs"},
		{name: "count 0 with memory", pod: newPod(ctr("main", "nvidia.com/gpu", "0", "nvidia.com/gpumem", "100")), deny: "limits[nvidia.com/gpu]: 0, but the container also asks for GPU memory or cores"},
		{name: "memory and percentage both", pod: newPod(ctr("main", "nvidia.com/gpumem", "100", "nvidia.com/gpumem-percentage", "10")), deny: "are both set; set one of them"},
		{name: "GPU policy", pod: withAnno(newPod(gpu()), device.AnnoGPUPolicy, "fastest"), deny: `metadata.annotations[hami.io/gpu-scheduler-policy]: "fastest" is not a scheduler policy (binpack or spread)`},
		{name: "node policy", pod: withAnno(newPod(gpu()), device.AnnoNodePolicy, "Spread"), deny: `metadata.annotations[hami.io/node-scheduler-policy]: "Spread" is not a scheduler policy`},
		{name: "numa-bind", pod: withAnno(newPod(gpu()), device.AnnoNUMABind, "yes"), deny: `metadata.annotations[nvidia.com/numa-bind]: "yes" is not true or false`},
		{name: "use-gputype without a token", pod: withAnno(newPod(gpu()), device.AnnoUseGPUType, "A100,--"), deny: `metadata.annotations[nvidia.com/use-gputype]: "--" has no model token`},
		{name: "nouse-gputype without a token", pod: withAnno(newPod(gpu()), device.AnnoNoUseGPUType, "/"), deny: `metadata.annotations[nvidia.com/nouse-gputype]: "/" has no model token`},
		{name: "model both used and avoided", pod: withAnno(withAnno(newPod(gpu()), device.AnnoUseGPUType, "A100"), device.AnnoNoUseGPUType, "a100"), deny: `both name "A100"; no GPU could match`},
		{name: "bad UUID", pod: withAnno(newPod(gpu()), device.AnnoUseGPUUUID, "GPU-1 GPU-2"), deny: `metadata.annotations[nvidia.com/use-gpuuuid]: "GPU-1 GPU-2" is not a GPU UUID`},
		{name: "bad avoided UUID", pod: withAnno(newPod(gpu()), device.AnnoNoUseGPUUUID, "GPU-1::0"), deny: `metadata.annotations[nvidia.com/nouse-gpuuuid]: "GPU-1::0" is not a GPU UUID`},
		{name: "UUID both used and avoided", pod: withAnno(withAnno(newPod(gpu()), device.AnnoUseGPUUUID, "GPU-1,GPU-2"), device.AnnoNoUseGPUUUID, "GPU-2"), deny: `both name "GPU-2"`},
		{name: "internal annotation on a new pod", pod: withAnno(newPod(gpu()), device.AnnoPlanned, "{}"), deny: "metadata.annotations[hami-go.io/allocation-planned]: set on a new pod; only hami-go writes it"},
		{name: "valid annotations accepted", pod: withAnno(withAnno(withAnno(newPod(gpu()), device.AnnoUseGPUType, "A100-SXM4, H100"), device.AnnoGPUPolicy, "spread"), device.AnnoNUMABind, "true"),
			paths: []string{"add /spec/containers/0/resources/limits/hami-go.io~1gpu-memory", "add /spec/containers/0/resources/requests", "replace /spec/schedulerName"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ph, _, m := testHandlers(c.cfg)
			ns := c.ns
			if ns == "" {
				ns = "team-a"
			}
			r := run(t, ph, admissionv1.Create, ns, c.pod)
			if c.deny != "" {
				if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, c.deny) {
					t.Fatalf("allowed=%v message %q, want denial with %q", r.resp.Allowed, r.resp.Result.Message, c.deny)
				}
				if len(r.resp.Patches) > 0 {
					t.Fatalf("denial carries patches %v", r.paths) // never "deny" and patch (C25)
				}
				if got := counter(t, m, "pods", resultDenied); got != 1 {
					t.Fatalf("denied counter %v", got)
				}
				return
			}
			if !r.resp.Allowed {
				t.Fatalf("denied: %s", r.resp.Result.Message)
			}
			sort.Strings(r.paths)
			sort.Strings(c.paths)
			if !reflect.DeepEqual(r.paths, c.paths) {
				t.Fatalf("patch ops %q, want %q", r.paths, c.paths)
			}
			if c.warning == "" && len(r.resp.Warnings) > 0 {
				t.Fatalf("unexpected warnings %q", r.resp.Warnings)
			}
			if c.warning != "" && (len(r.resp.Warnings) != 1 || !strings.Contains(r.resp.Warnings[0], c.warning)) {
				t.Fatalf("warnings %q, want %q", r.resp.Warnings, c.warning)
			}
			if c.check != nil {
				c.check(t, r.pod(t))
			}
		})
	}
}

func withAnno(p *corev1.Pod, k, v string) *corev1.Pod {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[k] = v
	return p
}

// The patch leaves fields this webhook does not know untouched (it diffs the raw JSON).
func TestPodPatchKeepsUnknownFields(t *testing.T) {
	ph, _, _ := testHandlers(nil)
	raw := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","futureField":{"x":1}},"spec":{"schedulerName":"default-scheduler","newSpecField":true,"containers":[{"name":"main","image":"i","resources":{"limits":{"nvidia.com/gpumem":"3k"}}}]}}`)
	r := run(t, ph, admissionv1.Create, "team-a", raw)
	want := `{"apiVersion":"v1","kind":"Pod","metadata":{"futureField":{"x":1},"name":"p"},"spec":{"containers":[{"image":"i","name":"main","resources":{"limits":{"hami-go.io/gpu-memory":"3000","nvidia.com/gpu":"1","nvidia.com/gpumem":"3k"},"requests":{"hami-go.io/gpu-memory":"3000"}}}],"newSpecField":true,"schedulerName":"hami-go-scheduler"}}`
	if got := string(normalize(t, r.patched)); got != want {
		t.Fatalf("patched\n%s\nwant\n%s", got, want)
	}
}

func TestPodOtherOperationsAndBadInput(t *testing.T) {
	ph, _, _ := testHandlers(nil)
	r := run(t, ph, admissionv1.Update, "team-a", newPod(ctr("main", "nvidia.com/gpumem", "0.5")))
	if !r.resp.Allowed || len(r.resp.Patches) != 0 {
		t.Fatalf("update: %+v", r.resp)
	}
	r = run(t, ph, admissionv1.Create, "team-a", []byte(`{"spec":`))
	if r.resp.Allowed || r.resp.Result.Code != 400 || !strings.Contains(r.resp.Result.Message, "decoding the pod") {
		t.Fatalf("bad JSON: %+v", r.resp.Result)
	}
}
