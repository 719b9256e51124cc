package webhook

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// Issue 37 item 4: a pod with no GPU limits that names the webhook's template, or a claim
// generated from one, would get a slice no quota counts: refused in both modes. A pod's claims
// of another driver are left alone.
func TestBorrowedClaimsRefused(t *testing.T) {
	withClaims := func(cs ...corev1.PodResourceClaim) *corev1.Pod {
		p := newPod(ctr("main", "cpu", "1"))
		p.Spec.ResourceClaims = cs
		return p
	}
	tmpl := func(name, t string) corev1.PodResourceClaim {
		return corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &t}
	}
	claim := func(name, c string) corev1.PodResourceClaim {
		return corev1.PodResourceClaim{Name: name, ResourceClaimName: &c}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		deny string
	}{
		{"the webhook's template, no limits", withClaims(tmpl("gpu", "hami-go-gpu-9f2c4e1a0b3d5e6f")),
			`spec.resourceClaims[0] (gpu).resourceClaimTemplateName: "hami-go-gpu-9f2c4e1a0b3d5e6f" is one of hami-go's GPU claims (DeviceClass gpu.hami-go.io), which hami-go's webhook alone writes into a pod from its GPU resource limits: ask for the slice with resources.limits (e.g. nvidia.com/gpu: 1, nvidia.com/gpumem: 20000)`},
		{"another pod's generated claim", withClaims(tmpl("fpga", "my-fpga"), claim("gpu", "trainer-hami-go-gpu-0-x7k2p")),
			`spec.resourceClaims[1] (gpu).resourceClaimName: "trainer-hami-go-gpu-0-x7k2p" is one of hami-go's GPU claims`},
		{"the template beside GPU limits", func() *corev1.Pod {
			p := newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1"))
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{tmpl("big", "hami-go-gpu-0000000000000000")}
			return p
		}(), `spec.resourceClaims[0] (big).resourceClaimTemplateName`},
		{"another driver's claims: left alone", withClaims(tmpl("fpga", "my-fpga"), claim("nic", "rdma-0")), ""},
	} {
		for _, dra := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: " (device plugin)", true: " (DRA)"}[dra], func(t *testing.T) {
				h, _, _ := testHandlers(nil)
				if dra {
					h = newDRAEnv(t, defaultFleet()...).h
				}
				r := run(t, h, admissionv1.Create, "team-a", tc.pod)
				if tc.deny == "" {
					if !r.resp.Allowed || len(r.resp.Patches) != 0 {
						t.Fatalf("allowed %v, %d patches (%s); want it left alone", r.resp.Allowed, len(r.resp.Patches), r.resp.Result.Message)
					}
					return
				}
				if r.resp.Allowed || !strings.Contains(r.resp.Result.Message, tc.deny) {
					t.Fatalf("allowed %v, message %q; want a denial containing %q", r.resp.Allowed, r.resp.Result.Message, tc.deny)
				}
			})
		}
	}
}
