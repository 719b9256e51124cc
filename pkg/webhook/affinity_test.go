package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// --gpu-memory-node-affinity (issue 25, autoscalers): a GPU pod asking MiB per GPU gets
// nvidia.com/gpu.memory Gt <largest MiB − 1> in every required node selector term; percentages,
// whole GPUs and pods without GPUs get nothing; off by default.
func TestGPUMemoryNodeAffinity(t *testing.T) {
	gt := func(v string) string { return "nvidia.com/gpu.memory Gt [" + v + "]" }
	hostname := "kubernetes.io/hostname In [node-a]"
	for _, tc := range []struct {
		name string
		off  bool
		pod  func() *corev1.Pod
		want [][]string // per term, its expressions
	}{
		{"mib", false, func() *corev1.Pod {
			return newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "60000"))
		}, [][]string{{gt("59999")}}},
		{"largest container wins", false, func() *corev1.Pod {
			p := newPod(ctr("a", "nvidia.com/gpu", "2", "nvidia.com/gpumem", "20000"), ctr("b", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "30000"))
			p.Spec.InitContainers = []corev1.Container{ctr("init", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "16Gi")}
			return p
		}, [][]string{{gt("29999")}}},
		{"every term of the user's", false, func() *corev1.Pod {
			p := newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "60000"))
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}}},
					{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-b"}}}},
				},
			}}}
			return p
		}, [][]string{{hostname, gt("59999")}, {gt("59999")}}},
		{"percentage", false, func() *corev1.Pod {
			return newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "50"))
		}, nil},
		{"whole GPU", false, func() *corev1.Pod { return newPod(ctr("main", "nvidia.com/gpu", "1")) }, nil},
		{"no GPU", false, func() *corev1.Pod { return newPod(ctr("main")) }, nil},
		{"off", true, func() *corev1.Pod {
			return newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "60000"))
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, _ := testHandlers(func(c *Config) { c.GPUMemoryNodeAffinity = !tc.off })
			r := run(t, h, admissionv1.Create, "team-a", tc.pod())
			if !r.resp.Allowed {
				t.Fatalf("denied: %s", r.resp.Result.Message)
			}
			var p corev1.Pod
			if err := json.Unmarshal(r.patched, &p); err != nil {
				t.Fatal(err)
			}
			var got [][]string
			if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
					var exprs []string
					for _, e := range term.MatchExpressions {
						exprs = append(exprs, e.Key+" "+string(e.Operator)+" ["+strings.Join(e.Values, ",")+"]")
					}
					got = append(got, exprs)
				}
			}
			if !equalTerms(got, tc.want) {
				t.Errorf("terms %q, want %q", got, tc.want)
			}
			if tc.want != nil && !strings.Contains(r.resp.Result.Message, "spec.affinity: node nvidia.com/gpu.memory >") {
				t.Errorf("message %q does not say what was added", r.resp.Result.Message)
			}
		})
	}
}

func equalTerms(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], ";") != strings.Join(b[i], ";") {
			return false
		}
	}
	return true
}
