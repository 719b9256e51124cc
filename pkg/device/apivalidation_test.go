package device

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// case C47 (issue 28 item 5): the words are the API server's (kube-apiserver v1.37.2, `kubectl create
// --dry-run=server` of each pod in a namespace the webhook does not see, after its defaulting
// copied limits to requests), so DRA mode refuses what device-plugin mode refuses, alike.
func TestValidateGPUResources(t *testing.T) {
	q := resource.MustParse
	list := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = q(kv[i+1])
		}
		return l
	}
	for _, tc := range []struct {
		name     string
		limits   corev1.ResourceList
		requests corev1.ResourceList
		want     string // the aggregate error; "" = valid
	}{
		{name: "limits with requests defaulted", limits: list("nvidia.com/gpu", "1", "nvidia.com/gpumem", "3000"), requests: list("nvidia.com/gpu", "1", "nvidia.com/gpumem", "3000")},
		{name: "same value, other spelling", limits: list("nvidia.com/gpumem", "3000"), requests: list("nvidia.com/gpumem", "3k")},
		{name: "request below the limit",
			limits: list("nvidia.com/gpumem", "3000"), requests: list("nvidia.com/gpumem", "2000"),
			want: `spec.containers[0].resources.requests: Invalid value: "2k": must be equal to nvidia.com/gpumem limit of 3k`},
		{name: "request without a limit", requests: list("nvidia.com/gpu", "1"),
			want: "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"},
		{name: "fractional count", limits: list("nvidia.com/gpu", "1.5"), requests: list("nvidia.com/gpu", "1.5"),
			want: `[spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "1500m": must be an integer, spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "1500m": must be an integer]`},
		{name: "negative cores", limits: list("nvidia.com/gpucores", "-1"), requests: list("nvidia.com/gpucores", "-1"),
			want: `[spec.containers[0].resources.limits[nvidia.com/gpucores]: Invalid value: "-1": must be greater than or equal to 0, spec.containers[0].resources.requests[nvidia.com/gpucores]: Invalid value: "-1": must be greater than or equal to 0]`},
		{name: "other resources are not ours", limits: list("cpu", "1.5"), requests: list("cpu", "500m", "example.com/foo", "1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: tc.limits, Requests: tc.requests}}}}
			got := ""
			if errs := ValidateGPUResources(spec, DefaultResourceNames()); len(errs) > 0 {
				got = errs.ToAggregate().Error()
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// An init container is checked under its own path, and a hostile quantity with a huge exponent
// is checked without materializing it.
func TestValidateGPUResourcesInitAndHuge(t *testing.T) {
	huge := resource.MustParse("9E999999")
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpumem": huge}}}},
		Containers:     []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpumem": huge}, Requests: corev1.ResourceList{"nvidia.com/gpumem": huge}}}},
	}
	// A hang here (exact arithmetic on 10^999999) would show as the test binary's timeout.
	got := ValidateGPUResources(spec, DefaultResourceNames()).ToAggregate().Error()
	if want := "spec.initContainers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
