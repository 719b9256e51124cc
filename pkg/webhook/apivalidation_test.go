package webhook

import (
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// case C47 (issue 28 item 5): what the API server refuses in a pod's GPU resources and the webhook's own
// parse (which reads limits) lets through, a request without its limit or unequal to it, is
// refused in DRA mode (where the resources move into a claim before the API server sees them)
// with the API server's own words, exactly as in device-plugin mode; nothing is created.
func TestGPUResourceValidationSameInBothModes(t *testing.T) {
	reqOnly := ctr("main")
	reqOnly.Resources.Requests = corev1.ResourceList{"nvidia.com/gpu": q("1")}
	unequal := withRequests(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "3000"))
	unequal.Resources.Requests["nvidia.com/gpumem"] = q("2000")
	fracRequest := withRequests(ctr("main", "nvidia.com/gpu", "1"))
	fracRequest.Resources.Requests["nvidia.com/gpu"] = q("1.5")
	for _, tc := range []struct {
		name string
		c    corev1.Container
		want string
	}{
		{"request without a limit", reqOnly, "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"},
		{"request below the limit", unequal, `spec.containers[0].resources.requests: Invalid value: "2k": must be equal to nvidia.com/gpumem limit of 3k`},
		{"fractional request beside a whole limit", fracRequest, `[spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "1500m": must be an integer, spec.containers[0].resources.requests: Invalid value: "1500m": must be equal to nvidia.com/gpu limit of 1]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp, _, _ := testHandlers(nil)
			r := run(t, dp, admissionv1.Create, "team-a", newPod(tc.c))
			if r.resp.Allowed || r.resp.Result.Message != tc.want {
				t.Errorf("device-plugin mode: allowed=%v %q, want %q", r.resp.Allowed, r.resp.Result.Message, tc.want)
			}
			e := newDRAEnv(t, defaultFleet()...)
			r = run(t, e.h, admissionv1.Create, "team-a", newPod(tc.c))
			if r.resp.Allowed || r.resp.Result.Message != tc.want {
				t.Errorf("DRA mode: allowed=%v %q, want %q", r.resp.Allowed, r.resp.Result.Message, tc.want)
			}
			if n := len(e.templates(t, "team-a")); n != 0 {
				t.Errorf("%d claim templates created for a refused pod", n)
			}
		})
	}
}
