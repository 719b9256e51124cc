package device

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ctr builds a container whose limits are the given resource/quantity pairs.
func ctr(name string, kv ...string) corev1.Container {
	c := corev1.Container{Name: name}
	if len(kv) > 0 {
		c.Resources.Limits = corev1.ResourceList{}
		for i := 0; i+1 < len(kv); i += 2 {
			c.Resources.Limits[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
	}
	return c
}

func sidecar(c corev1.Container) corev1.Container {
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	return c
}

const (
	rGPU  = "nvidia.com/gpu"
	rMem  = "nvidia.com/gpumem"
	rPct  = "nvidia.com/gpumem-percentage"
	rCore = "nvidia.com/gpucores"
)

func podOf(inits, apps []corev1.Container, annos map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: annos},
		Spec:       corev1.PodSpec{InitContainers: inits, Containers: apps},
	}
}

func TestParsePodRequest(t *testing.T) {
	names := DefaultResourceNames()
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		want  PodRequest
		errIn []string // all must appear in the error; nil: no error expected
	}{
		{
			// case C02: GPU container between two non-GPU ones; looked up by name, not position.
			name: "C02 none-gpu-none",
			pod:  podOf(nil, []corev1.Container{ctr("a"), ctr("gpu", rGPU, "1", rMem, "3000", rCore, "30"), ctr("c")}, nil),
			want: PodRequest{Containers: []ContainerRequest{{Name: "gpu", Kind: KindApp, Count: 1, MemoryMiB: 3000, CoresPercent: 30}}, GPUPolicy: Binpack, NodePolicy: Binpack},
		},
		{
			// case C02: [gpu][none][gpu]: two GPU containers, each its own entry, by name.
			name: "C02 gpu-none-gpu",
			pod:  podOf(nil, []corev1.Container{ctr("a", rGPU, "1", rMem, "1000"), ctr("b"), ctr("c", rGPU, "2", rPct, "25")}, nil),
			want: PodRequest{Containers: []ContainerRequest{
				{Name: "a", Kind: KindApp, Count: 1, MemoryMiB: 1000},
				{Name: "c", Kind: KindApp, Count: 2, MemoryPercent: 25},
			}, GPUPolicy: Binpack, NodePolicy: Binpack},
		},
		{
			// case C03: kinds from restartPolicy Always; init containers first, in spec order.
			name: "C03 kinds",
			pod: podOf(
				[]corev1.Container{ctr("init1", rGPU, "1", rMem, "10240"), sidecar(ctr("side", rGPU, "1", rPct, "50")), ctr("noGPU")},
				[]corev1.Container{ctr("app", rGPU, "1", rPct, "50")}, nil),
			want: PodRequest{Containers: []ContainerRequest{
				{Name: "init1", Kind: KindInit, Count: 1, MemoryMiB: 10240},
				{Name: "side", Kind: KindSidecar, Count: 1, MemoryPercent: 50},
				{Name: "app", Kind: KindApp, Count: 1, MemoryPercent: 50},
			}, GPUPolicy: Binpack, NodePolicy: Binpack},
		},
		{
			name: "count defaults to 1 when only memory is given",
			pod:  podOf(nil, []corev1.Container{ctr("m", rMem, "16Gi")}, nil),
			want: PodRequest{Containers: []ContainerRequest{{Name: "m", Kind: KindApp, Count: 1, MemoryMiB: 16384}}, GPUPolicy: Binpack, NodePolicy: Binpack},
		},
		{
			name: "count defaults to 1 when only cores are given; memory 100%",
			pod:  podOf(nil, []corev1.Container{ctr("k", rCore, "100")}, nil),
			want: PodRequest{Containers: []ContainerRequest{{Name: "k", Kind: KindApp, Count: 1, MemoryPercent: 100, CoresPercent: 100}}, GPUPolicy: Binpack, NodePolicy: Binpack},
		},
		{
			name: "memory 100% when none given",
			pod:  podOf(nil, []corev1.Container{ctr("g", rGPU, "2")}, nil),
			want: PodRequest{Containers: []ContainerRequest{{Name: "g", Kind: KindApp, Count: 2, MemoryPercent: 100}}, GPUPolicy: Binpack, NodePolicy: Binpack},
		},
		{
			name: "count 0 and nothing else: no GPU",
			pod:  podOf(nil, []corev1.Container{ctr("z", rGPU, "0")}, nil),
			want: PodRequest{GPUPolicy: Binpack, NodePolicy: Binpack},
		},
		{
			name: "requests are read where limits are missing",
			pod: func() *corev1.Pod {
				c := corev1.Container{Name: "r"}
				c.Resources.Requests = corev1.ResourceList{rGPU: resource.MustParse("1"), rMem: resource.MustParse("3k")}
				return podOf(nil, []corev1.Container{c}, nil)
			}(),
			want: PodRequest{Containers: []ContainerRequest{{Name: "r", Kind: KindApp, Count: 1, MemoryMiB: 3000}}, GPUPolicy: Binpack, NodePolicy: Binpack},
		},
		{
			name: "annotations",
			pod: podOf(nil, []corev1.Container{ctr("g", rGPU, "1")}, map[string]string{
				AnnoUseGPUType:   "A100, H100 ,",
				AnnoNoUseGPUType: "A10",
				AnnoUseGPUUUID:   "GPU-a,GPU-b",
				AnnoNoUseGPUUUID: " GPU-c ",
				AnnoGPUPolicy:    "spread",
				AnnoNodePolicy:   "binpack",
				AnnoNUMABind:     "true",
			}),
			want: PodRequest{
				Containers:  []ContainerRequest{{Name: "g", Kind: KindApp, Count: 1, MemoryPercent: 100}},
				UseModels:   []string{"A100", "H100"},
				AvoidModels: []string{"A10"},
				UseUUIDs:    []string{"GPU-a", "GPU-b"},
				AvoidUUIDs:  []string{"GPU-c"},
				NUMABind:    true,
				GPUPolicy:   Spread,
				NodePolicy:  Binpack,
			},
		},
		{
			name:  "gpumem and percentage both set: error names both fields",
			pod:   podOf(nil, []corev1.Container{ctr("both", rGPU, "1", rMem, "3000", rPct, "50")}, nil),
			errIn: []string{"spec.containers[both].resources.limits[nvidia.com/gpumem]", "spec.containers[both].resources.limits[nvidia.com/gpumem-percentage]", "both set"},
		},
		{
			name:  "count 0 with memory",
			pod:   podOf(nil, []corev1.Container{ctr("z", rGPU, "0", rMem, "1000")}, nil),
			errIn: []string{"spec.containers[z].resources.limits[nvidia.com/gpu]: 0", "also asks for GPU memory"},
		},
		{
			name:  "bad quantity in an init container names the init container",
			pod:   podOf([]corev1.Container{ctr("warm", rGPU, "1", rMem, "3000M")}, nil, nil),
			errIn: []string{"spec.initContainers[warm].resources.limits[nvidia.com/gpumem]: 3G", "did you mean 3000Mi"},
		},
		{
			name:  "fractional count",
			pod:   podOf(nil, []corev1.Container{ctr("f", rGPU, "500m")}, nil),
			errIn: []string{"spec.containers[f].resources.limits[nvidia.com/gpu]: 500m"},
		},
		{
			// case C08: 0 is rejected for gpumem-percentage.
			name:  "percentage 0",
			pod:   podOf(nil, []corev1.Container{ctr("p", rGPU, "1", rPct, "0")}, nil),
			errIn: []string{"spec.containers[p].resources.limits[nvidia.com/gpumem-percentage]: 0 is outside 1..100"},
		},
		{
			name:  "cores above 100",
			pod:   podOf(nil, []corev1.Container{ctr("c", rGPU, "1", rCore, "150")}, nil),
			errIn: []string{"spec.containers[c].resources.limits[nvidia.com/gpucores]: 150 is outside 0..100"},
		},
		{
			name:  "bad GPU policy",
			pod:   podOf(nil, []corev1.Container{ctr("g", rGPU, "1")}, map[string]string{AnnoGPUPolicy: "fullest"}),
			errIn: []string{"metadata.annotations[hami.io/gpu-scheduler-policy]", `"fullest"`},
		},
		{
			name:  "bad node policy",
			pod:   podOf(nil, []corev1.Container{ctr("g", rGPU, "1")}, map[string]string{AnnoNodePolicy: "Spread"}),
			errIn: []string{"metadata.annotations[hami.io/node-scheduler-policy]", `"Spread"`},
		},
		{
			name:  "bad numa-bind",
			pod:   podOf(nil, []corev1.Container{ctr("g", rGPU, "1")}, map[string]string{AnnoNUMABind: "yes"}),
			errIn: []string{"metadata.annotations[nvidia.com/numa-bind]", `"yes"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePodRequest(tc.pod, names)
			if tc.errIn != nil {
				if err == nil {
					t.Fatalf("no error; got %+v", got)
				}
				for _, part := range tc.errIn {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q does not contain %q", err, part)
					}
				}
				if !reflect.DeepEqual(got, PodRequest{}) {
					t.Errorf("half-parsed request returned with the error: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestParsePodRequestCustomNames(t *testing.T) {
	names := ResourceNames{Count: "example.com/vgpu", Memory: "example.com/vgpu-mem", MemoryPercent: "example.com/vgpu-pct", Cores: "example.com/vgpu-cores"}
	pod := podOf(nil, []corev1.Container{ctr("a", "example.com/vgpu", "1", "example.com/vgpu-mem", "2Gi"), ctr("b", rGPU, "1")}, nil)
	got, err := ParsePodRequest(pod, names)
	if err != nil {
		t.Fatal(err)
	}
	want := []ContainerRequest{{Name: "a", Kind: KindApp, Count: 1, MemoryMiB: 2048}}
	if !reflect.DeepEqual(got.Containers, want) {
		t.Errorf("containers %+v, want %+v (nvidia.com/gpu is not ours under custom names)", got.Containers, want)
	}
	if !got.UsesGPU() {
		t.Error("UsesGPU false for a pod with a GPU container")
	}
	if (&PodRequest{}).UsesGPU() {
		t.Error("UsesGPU true for an empty request")
	}
}

// case C03: Kubernetes' effective-request rule (k8s.io/component-helpers resource.PodRequests).
func TestPhases(t *testing.T) {
	init := func(n string) ContainerRequest { return ContainerRequest{Name: n, Kind: KindInit, Count: 1} }
	side := func(n string) ContainerRequest { return ContainerRequest{Name: n, Kind: KindSidecar, Count: 1} }
	app := func(n string) ContainerRequest { return ContainerRequest{Name: n, Kind: KindApp, Count: 1} }
	for _, tc := range []struct {
		name string
		cs   []ContainerRequest
		want [][]int
	}{
		// Case A: three classic init containers, app without GPU: each init runs alone.
		{"C03 A", []ContainerRequest{init("i1"), init("i2"), init("i3")}, [][]int{{0}, {1}, {2}}},
		// Case B: native sidecar + app: both run together (charged 50% + 50% = 100%).
		{"C03 B", []ContainerRequest{side("s"), app("a")}, [][]int{{0, 1}}},
		// Case C: [sidecar][classic init]: the init runs beside the sidecar (110% at init time),
		// then the sidecar alone.
		{"C03 C", []ContainerRequest{side("s"), init("i")}, [][]int{{0, 1}, {0}}},
		{"sidecar only from its declaration on", []ContainerRequest{init("i1"), side("s"), init("i2"), app("a")}, [][]int{{0}, {1, 2}, {1, 3}}},
		{"apps only", []ContainerRequest{app("a"), app("b")}, [][]int{{0, 1}}},
		{"empty", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := PodRequest{Containers: tc.cs}
			if got := r.Phases(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Phases() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMemoryOnAndExclusive(t *testing.T) {
	for _, tc := range []struct {
		c     ContainerRequest
		total int64
		want  int64
	}{
		{ContainerRequest{MemoryMiB: 3000}, 24000, 3000},
		{ContainerRequest{MemoryPercent: 20}, 24000, 4800}, // case C08
		{ContainerRequest{MemoryPercent: 1}, 10, 1},        // rounds up, never 0
		{ContainerRequest{}, 24000, 24000},                 // neither given: 100%, never 0 MiB
	} {
		if got := tc.c.MemoryOn(tc.total); got != tc.want {
			t.Errorf("%+v.MemoryOn(%d) = %d, want %d", tc.c, tc.total, got, tc.want)
		}
	}
	if !(&ContainerRequest{CoresPercent: 100}).Exclusive() || (&ContainerRequest{CoresPercent: 99}).Exclusive() {
		t.Error("Exclusive must be true exactly at 100% cores")
	}
}

func TestParsePolicy(t *testing.T) {
	if p, err := ParsePolicy("f", "", Spread); err != nil || p != Spread {
		t.Errorf("empty = %q, %v; want the default spread", p, err)
	}
	if p, err := ParsePolicy("f", "binpack", Spread); err != nil || p != Binpack {
		t.Errorf("binpack = %q, %v", p, err)
	}
	if _, err := ParsePolicy("my.field", "BINPACK", Binpack); err == nil || !strings.Contains(err.Error(), `my.field: "BINPACK"`) {
		t.Errorf("BINPACK: %v; want an error naming field and value", err)
	}
}
