package ray

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hami-go/hami-go/pkg/device"
)

func limits(kv ...string) corev1.ResourceRequirements {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return corev1.ResourceRequirements{Limits: l}
}

func TestGPUCount(t *testing.T) {
	c := DefaultConfig("nvidia.com/gpu")
	for _, tc := range []struct {
		name     string
		res      corev1.ResourceRequirements
		dflt     int
		want     int
		wantErr  string
		repeated bool
	}{
		{name: "C32a two slices", res: limits("nvidia.com/gpu", "2"), want: 2},
		{name: "C32b gpumem 8000 with 1 slice is 1, never 8000", res: limits("nvidia.com/gpu", "1", "nvidia.com/gpumem", "8000"), want: 1},
		{name: "C32b gpumem only, count defaulted by the webhook", res: limits("nvidia.com/gpumem", "8000"), dflt: 1, want: 1},
		{name: "C32c MIG 1g.10gb", res: limits("nvidia.com/mig-1g.10gb", "1"), want: 1},
		{name: "C32d count and MIG: list order decides", res: limits("nvidia.com/mig-1g.10gb", "3", "nvidia.com/gpu", "2"), want: 2, repeated: true},
		{name: "C32d two MIG names: lexical order decides", res: limits("nvidia.com/mig-3g.40gb", "2", "nvidia.com/mig-1g.10gb", "1"), want: 1, repeated: true},
		{name: "C33 no GPU", res: limits("cpu", "2", "memory", "4Gi"), want: 0},
		{name: "zero count skipped", res: limits("nvidia.com/gpu", "0", "nvidia.com/mig-2g.20gb", "1"), want: 1},
		{name: "fraction is an error", res: limits("nvidia.com/mig-1g.10gb", "500m"), wantErr: "spec.containers[ray].resources.limits[nvidia.com/mig-1g.10gb]: 500m (Kubernetes' canonical form; = 0.5) is not a whole number of GPUs"},
		{name: "requests when no limit", res: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("3")}}, want: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 1
			if tc.repeated {
				runs = 50 // map order must not matter
			}
			for i := 0; i < runs; i++ {
				got, err := c.GPUCount("spec.containers[ray]", tc.res, "nvidia.com/gpu", tc.dflt)
				if tc.wantErr != "" {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("err = %v, want %q", err, tc.wantErr)
					}
					return
				}
				if err != nil || got != tc.want {
					t.Fatalf("GPUCount = %d, %v; want %d", got, err, tc.want)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	names := device.DefaultResourceNames()
	if err := DefaultConfig(names.Count).Validate(names); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{}, "list is empty"},
		{Config{GPUResources: []string{"nvidia.com/gpu", "nvidia.com/gpumem"}}, `"nvidia.com/gpumem" matches nvidia.com/gpumem`},
		{Config{GPUResources: []string{"nvidia.com/*"}}, "not a GPU count"},
		{Config{GPUResources: []string{"*"}}, "not a resource name"},
		{Config{GPUResources: []string{"nvidia.com/gpu"}, MemoryResource: `a"b`}, "ray memory resource"},
		{Config{GPUResources: []string{"nvidia.com/gpu"}, AcceleratorLabel: "bad label"}, "not a label key"},
	} {
		err := tc.c.Validate(names)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.c, err, tc.want)
		}
	}
}
