package nri

import (
	"errors"
	"reflect"
	"testing"
)

const mem0 = "CUDA_DEVICE_MEMORY_LIMIT_0"

func set(n, v string) EnvChange { return EnvChange{Name: n, Value: v} }
func empty(n string) EnvChange  { return EnvChange{Name: n} }

// case C37: what PlanEnv decides for each order containerd 2.4 produces (image ENV, then the
// device plugin's env, then the pod's envFrom and env, duplicates kept).
func TestPlanEnv(t *testing.T) {
	gpu := map[string]string{mem0: "1000m", "CUDA_VISIBLE_DEVICES": "GPU-a", "PATH": "/ignored"}
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
		env:  []string{"LD_PRELOAD=/evil.so", mem0 + "=1000m", "CUDA_VISIBLE_DEVICES=GPU-a"},
		want: gpu,
		out:  []EnvChange{set(mem0, "1000m"), set("CUDA_VISIBLE_DEVICES", "GPU-a"), empty("LD_PRELOAD")},
	}, {
		name: "container without GPUs: every protected name emptied, others kept",
		env:  []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "HAMI_GO_GPU_MODEL=H100", "FOO=1", "broken"},
		want: nil,
		out:  []EnvChange{empty("HAMI_GO_GPU_MODEL"), empty("NVIDIA_VISIBLE_DEVICES")},
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

func TestRefusedErrorMessage(t *testing.T) {
	e := &RefusedError{Name: mem0, Value: "81920m", Want: "1000m", HasWant: true}
	want := "hami-go: the container's env sets CUDA_DEVICE_MEMORY_LIMIT_0=81920m after the value CUDA_DEVICE_MEMORY_LIMIT_0=1000m " +
		"that hami-go allocated; env, envFrom and image ENV may not change a GPU slice's limits (remove CUDA_DEVICE_MEMORY_LIMIT_0 from the container's env)"
	if e.Error() != want {
		t.Errorf("Error() = %q\nwant      %q", e.Error(), want)
	}
}
