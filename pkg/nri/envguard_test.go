package nri

import (
	"errors"
	"reflect"
	"sort"
	"testing"
)

const mem0 = "CUDA_DEVICE_MEMORY_LIMIT_0"

func set(n, v string) EnvChange { return EnvChange{Name: n, Value: v} }
func empty(n string) EnvChange  { return EnvChange{Name: n} }

// case C37: what PlanEnv decides for each order containerd 2.4 produces (image ENV, then the
// device plugin's env, then the pod's envFrom and env, duplicates kept).
func TestPlanEnv(t *testing.T) {
	gpu := map[string]string{mem0: "1000m", "CUDA_VISIBLE_DEVICES": "GPU-a"}
	for _, tc := range []struct {
		name string
		env  []string
		want map[string]string
		out  []EnvChange
	}{{
		name: "image ENV first: the plugin's later value is set once",
		env:  []string{"PATH=/bin", mem0 + "=99999m", "IMG=1", mem0 + "=1000m", "CUDA_VISIBLE_DEVICES=GPU-a"},
		want: gpu,
		out:  []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a")},
	}, {
		name: "duplicates of the plugin's own value",
		env:  []string{mem0 + "=1000m", "CUDA_VISIBLE_DEVICES=GPU-a", mem0 + "=1000m"},
		want: gpu,
		out:  []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a")},
	}, {
		name: "a wanted name missing from the env is added",
		env:  []string{"CUDA_VISIBLE_DEVICES=GPU-a"},
		want: gpu,
		out:  []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a")},
	}, {
		name: "a protected name the allocation does not set is emptied (image ENV)",
		env:  []string{"CUDA_DEVICE_SM_LIMIT=100", mem0 + "=1000m", "CUDA_VISIBLE_DEVICES=GPU-a"},
		want: gpu,
		out:  []EnvChange{set(mem0, "1000m"), set("CUDA_DEVICE_SM_LIMIT", ""), set("CUDA_VISIBLE_DEVICES", "GPU-a")},
	}, {
		name: "container without GPUs: a widening NVIDIA_VISIBLE_DEVICES emptied, everything else kept (case C54)",
		env:  []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "HAMI_GO_GPU_MODEL=H100", "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "FOO=1", "broken"},
		want: nil,
		out:  []EnvChange{empty("NVIDIA_VISIBLE_DEVICES")},
	}, {
		name: "container without GPUs and no protected env: nothing",
		env:  []string{"PATH=/bin", "CUDA_HOME=/usr/local/cuda"},
		want: nil,
		out:  nil,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlanEnv(tc.env, tc.want, tc.want)
			if err != nil {
				t.Fatalf("PlanEnv: %v", err)
			}
			if !reflect.DeepEqual(got, tc.out) {
				t.Errorf("PlanEnv = %+v, want %+v", got, tc.out)
			}
		})
	}
}

// case C37: a later entry (pod env, envFrom) wins over any NRI adjustment in containerd 2.4, so
// the container is refused, naming the variable and both values.
func TestPlanEnvRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want map[string]string
		err  RefusedError
	}{{
		name: "pod env after the plugin's value",
		env:  []string{"PATH=/bin", mem0 + "=1000m", "CUDA_VISIBLE_DEVICES=GPU-a", mem0 + "=81920m"},
		want: map[string]string{mem0: "1000m", "CUDA_VISIBLE_DEVICES": "GPU-a"},
		err:  RefusedError{Name: mem0, Value: "81920m", Want: "1000m", HasWant: true},
	}, {
		name: "image ENV, plugin, then envFrom",
		env:  []string{mem0 + "=99999m", mem0 + "=1000m", mem0 + "=70000m"},
		want: map[string]string{mem0: "1000m"},
		err:  RefusedError{Name: mem0, Value: "70000m", Want: "1000m", HasWant: true},
	}, {
		name: "container without GPUs repeating a protected name",
		env:  []string{"NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_VISIBLE_DEVICES=all"},
		want: nil,
		err:  RefusedError{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlanEnv(tc.env, tc.want, tc.want)
			var r *RefusedError
			if !errors.As(err, &r) {
				t.Fatalf("PlanEnv = %+v, %v; want a *RefusedError", got, err)
			}
			if *r != tc.err {
				t.Errorf("refusal %+v, want %+v", *r, tc.err)
			}
			if got != nil {
				t.Errorf("changes %+v returned with the refusal", got)
			}
		})
	}
}

// case C54 (issue 36 item 9): what a container may set itself. The GPU container's want is what
// gpuenv.Build gives it now: no CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and the log level set.
func TestPlanEnvC54LeavesNarrowingValues(t *testing.T) {
	jemalloc := "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
	gpu := map[string]string{mem0: "1000m", "HAMI_GO_GPU_UUIDS": "GPU-a,GPU-b", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "LIBCUDA_LOG_LEVEL": "1"}
	pinned := []EnvChange{set("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), set(mem0, "1000m"), set("HAMI_GO_GPU_UUIDS", "GPU-a,GPU-b")}
	plugin := []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", mem0 + "=1000m", "HAMI_GO_GPU_UUIDS=GPU-a,GPU-b", "LIBCUDA_LOG_LEVEL=1"}
	withLog := append(append([]EnvChange(nil), pinned...), set("LIBCUDA_LOG_LEVEL", "1"))
	sortChanges(withLog)
	for _, tc := range []struct {
		name string
		env  []string
		want map[string]string
		out  []EnvChange
	}{{
		name: "no GPU: the pod's own LD_PRELOAD, CUDA_VISIBLE_DEVICES=-1, NVIDIA_VISIBLE_DEVICES=none untouched",
		env:  []string{jemalloc, "CUDA_VISIBLE_DEVICES=-1", "NVIDIA_VISIBLE_DEVICES=none", mem0 + "=5m"},
		out:  nil,
	}, {
		name: "no GPU: repeated, the last naming no device",
		env:  []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=void"},
		out:  nil,
	}, {
		name: "GPU: the pod's own unrelated LD_PRELOAD after hami-go's env is kept",
		env:  append(append([]string{}, plugin...), jemalloc),
		want: gpu,
		out:  withLog,
	}, {
		name: "GPU: image LD_PRELOAD is kept",
		env:  append([]string{jemalloc}, plugin...),
		want: gpu,
		out:  withLog,
	}, {
		name: "GPU: the pod narrows to no device after hami-go's env",
		env:  append(append([]string{}, plugin...), "CUDA_VISIBLE_DEVICES=-1", "NVIDIA_VISIBLE_DEVICES=void"),
		want: gpu,
		out:  withLog,
	}, {
		name: "GPU: the pod's own log level wins",
		env:  append(append([]string{}, plugin...), "LIBCUDA_LOG_LEVEL=4"),
		want: gpu,
		out:  pinned,
	}, {
		name: "GPU: an image CUDA_VISIBLE_DEVICES naming devices becomes the identity list",
		env:  append([]string{"CUDA_VISIBLE_DEVICES=1"}, plugin...),
		want: gpu,
		out:  append([]EnvChange{set("CUDA_VISIBLE_DEVICES", "0,1")}, withLog...),
	}, {
		name: "GPU, hami-go's LD_PRELOAD (no preload file): a list that keeps it stays",
		env:  []string{mem0 + "=1000m", "LD_PRELOAD=/usr/local/vgpu/libvgpu.so", "LD_PRELOAD=/usr/local/vgpu/libvgpu.so:/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
		want: map[string]string{"LD_PRELOAD": "/usr/local/vgpu/libvgpu.so", mem0: "1000m"},
		out:  []EnvChange{set(mem0, "1000m")},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			answer := tc.want
			got, err := PlanEnv(tc.env, answer, tc.want)
			if err != nil {
				t.Fatalf("PlanEnv: %v", err)
			}
			sortChanges(tc.out)
			if !reflect.DeepEqual(got, tc.out) {
				t.Errorf("PlanEnv = %+v\nwant       %+v", got, tc.out)
			}
		})
	}
}

// case C54: what still widens is refused (or, where an adjustment can, closed above).
func TestPlanEnvC54RefusesWidening(t *testing.T) {
	gpu := map[string]string{mem0: "1000m", "HAMI_GO_GPU_UUIDS": "GPU-a,GPU-b"}
	for _, tc := range []struct {
		name string
		env  []string
		want map[string]string
		err  RefusedError
	}{{
		name: "GPU: the pod names devices in CUDA_VISIBLE_DEVICES",
		env:  []string{mem0 + "=1000m", "HAMI_GO_GPU_UUIDS=GPU-a,GPU-b", "CUDA_VISIBLE_DEVICES=1,0"},
		want: gpu,
		err:  RefusedError{Name: "CUDA_VISIBLE_DEVICES", Value: "1,0", DeviceList: true},
	}, {
		name: "GPU, hami-go's LD_PRELOAD: the pod's list drops it",
		env:  []string{"LD_PRELOAD=/usr/local/vgpu/libvgpu.so", "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"},
		want: map[string]string{"LD_PRELOAD": "/usr/local/vgpu/libvgpu.so"},
		err:  RefusedError{Name: "LD_PRELOAD", Value: "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", Want: "/usr/local/vgpu/libvgpu.so", HasWant: true},
	}, {
		name: "GPU: the pod's own CUDA_DEVICE_ORDER",
		env:  []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_DEVICE_ORDER=FASTEST_FIRST"},
		want: map[string]string{"CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
		err:  RefusedError{Name: "CUDA_DEVICE_ORDER", Value: "FASTEST_FIRST", Want: "PCI_BUS_ID", HasWant: true},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PlanEnv(tc.env, tc.want, tc.want)
			var r *RefusedError
			if !errors.As(err, &r) || *r != tc.err {
				t.Fatalf("PlanEnv error %v, want %+v", err, tc.err)
			}
		})
	}
}

func sortChanges(c []EnvChange) { sort.Slice(c, func(i, j int) bool { return c[i].Name < c[j].Name }) }

func TestRefusedErrorMessage(t *testing.T) {
	e := &RefusedError{Name: mem0, Value: "81920m", Want: "1000m", HasWant: true}
	want := "hami-go: the container's env sets CUDA_DEVICE_MEMORY_LIMIT_0=81920m after the value CUDA_DEVICE_MEMORY_LIMIT_0=1000m " +
		"that hami-go allocated; env, envFrom and image ENV may not change a GPU slice's limits (remove CUDA_DEVICE_MEMORY_LIMIT_0 from the container's env)"
	if e.Error() != want {
		t.Errorf("Error() = %q\nwant      %q", e.Error(), want)
	}
}

// A claim prepared by a release before issue 36 still carries CUDA_VISIBLE_DEVICES=<its UUIDs>
// in its CDI spec, which a container of that claim gets again when it restarts after the
// upgrade: naming exactly the container's own GPUs (in any order), it widens nothing and becomes
// 0..n-1 (the DRA upgrade test's restarted container was refused before); a list naming another
// GPU is still refused.
func TestPlanEnvC54PreviousReleasesOwnDeviceList(t *testing.T) {
	gpu := map[string]string{mem0: "1000m", "HAMI_GO_GPU_UUIDS": "GPU-a,GPU-b"}
	env := []string{mem0 + "=1000m", "HAMI_GO_GPU_UUIDS=GPU-a,GPU-b", "CUDA_VISIBLE_DEVICES=GPU-b,GPU-a"}
	changes, err := PlanEnv(env, gpu, gpu)
	if err != nil {
		t.Fatalf("PlanEnv: %v", err)
	}
	var got string
	for _, c := range changes {
		if c.Name == "CUDA_VISIBLE_DEVICES" {
			got = c.Value
		}
	}
	if got != "0,1" {
		t.Errorf("CUDA_VISIBLE_DEVICES becomes %q, want 0,1 (changes %+v)", got, changes)
	}
	env[2] = "CUDA_VISIBLE_DEVICES=GPU-a,GPU-c"
	var r *RefusedError
	if _, err := PlanEnv(env, gpu, gpu); !errors.As(err, &r) || !r.DeviceList || r.Value != "GPU-a,GPU-c" {
		t.Errorf("a list naming another GPU: error %v, want a DeviceList refusal", err)
	}
}
