package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hami-go/hami-go/pkg/device"
)

func hamiSource(name string, hard map[string]string) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", UID: types.UID("uid-" + name)},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}},
	}
	for k, v := range hard {
		q.Spec.Hard[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return q
}

// Case C60.
func TestHAMiQuotaSibling(t *testing.T) {
	names := device.DefaultResourceNames()
	custom := names
	custom.Memory, custom.Cores = "example.com/vmem", "example.com/vcores"
	mem, cores := corev1.ResourceName(device.QuotaResourceGPUMemory), corev1.ResourceName(device.QuotaResourceGPUCores)
	for _, tc := range []struct {
		name     string
		names    device.ResourceNames
		hard     map[string]string
		want     map[corev1.ResourceName]int64 // nil: no sibling
		problems []string                      // substrings, one per problem
	}{
		{name: "limits memory", hard: map[string]string{"limits.nvidia.com/gpumem": "40000"}, want: map[corev1.ResourceName]int64{mem: 40000}},
		{name: "limit memory (HAMi's guide)", hard: map[string]string{"limit.nvidia.com/gpumem": "40000"}, want: map[corev1.ResourceName]int64{mem: 40000}},
		{name: "both spellings: the smaller", hard: map[string]string{"limits.nvidia.com/gpumem": "40000", "limit.nvidia.com/gpumem": "30000"}, want: map[corev1.ResourceName]int64{mem: 30000}},
		{name: "both spellings: the smaller, other order", hard: map[string]string{"limits.nvidia.com/gpumem": "20k", "limit.nvidia.com/gpumem": "30000"}, want: map[corev1.ResourceName]int64{mem: 20000}},
		{name: "cores", hard: map[string]string{"limits.nvidia.com/gpucores": "250"}, want: map[corev1.ResourceName]int64{cores: 250}},
		{name: "cores both spellings", hard: map[string]string{"limits.nvidia.com/gpucores": "250", "limit.nvidia.com/gpucores": "300"}, want: map[corev1.ResourceName]int64{cores: 250}},
		{name: "memory and cores, other keys dropped", hard: map[string]string{"limits.nvidia.com/gpumem": "40000", "limit.nvidia.com/gpucores": "200", "pods": "10", "requests.nvidia.com/gpu": "4"},
			want: map[corev1.ResourceName]int64{mem: 40000, cores: 200}},
		{name: "zero is a cap", hard: map[string]string{"limits.nvidia.com/gpumem": "0"}, want: map[corev1.ResourceName]int64{mem: 0}},
		{name: "no HAMi key", hard: map[string]string{"pods": "10", "requests.hami-go.io/gpu-memory": "40000", "limits.nvidia.com/gpu": "2"}},
		{name: "other names' keys are not HAMi's here", names: custom, hard: map[string]string{"limits.nvidia.com/gpumem": "40000"}},
		{name: "configured names", names: custom, hard: map[string]string{"limits.example.com/vmem": "8000", "limit.example.com/vcores": "100"}, want: map[corev1.ResourceName]int64{mem: 8000, cores: 100}},
		{name: "fraction", hard: map[string]string{"limits.nvidia.com/gpumem": "1.5"}, problems: []string{"spec.hard[limits.nvidia.com/gpumem]: 1500m is not a whole number"}},
		{name: "binary suffix", hard: map[string]string{"limit.nvidia.com/gpumem": "40Gi"}, problems: []string{"spec.hard[limit.nvidia.com/gpumem]: 40Gi has a binary suffix"}},
		{name: "negative", hard: map[string]string{"limits.nvidia.com/gpucores": "-1"}, problems: []string{"is negative"}},
		{name: "an invalid spelling beside a valid one", hard: map[string]string{"limits.nvidia.com/gpumem": "40000", "limit.nvidia.com/gpumem": "100m"},
			want: map[corev1.ResourceName]int64{mem: 40000}, problems: []string{"spec.hard[limit.nvidia.com/gpumem]: 100m is not a whole number"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := names
			if tc.names.Memory != "" {
				n = tc.names
			}
			src := hamiSource("gpu", tc.hard)
			sib, problems := HAMiQuotaSibling(src, n)
			if len(problems) != len(tc.problems) {
				t.Fatalf("problems %v, want %q", problems, tc.problems)
			}
			for i, p := range problems {
				if !strings.Contains(p.String(), tc.problems[i]) {
					t.Errorf("problem %q, want it to hold %q", p, tc.problems[i])
				}
			}
			if tc.want == nil {
				if sib != nil {
					t.Fatalf("sibling %+v, want none", sib.Spec.Hard)
				}
				return
			}
			if sib == nil {
				t.Fatalf("no sibling, want %v", tc.want)
			}
			if len(sib.Spec.Hard) != len(tc.want) {
				t.Fatalf("hard %v, want %v", sib.Spec.Hard, tc.want)
			}
			for k, v := range tc.want {
				q, ok := sib.Spec.Hard[k]
				if !ok || q.Value() != v || q.Format != resource.DecimalSI {
					t.Errorf("hard[%s] = %s (present %v), want %d", k, q.String(), ok, v)
				}
			}
			if sib.Name != "gpu-hami-go" || sib.Namespace != "team" || sib.Labels[LabelManagedBy] != "hami-go" || sib.Labels[LabelHAMiQuotaSource] != "gpu" || sib.Annotations[AnnotationHAMiQuotaSource] != "gpu" {
				t.Errorf("meta %+v", sib.ObjectMeta)
			}
			ref := metav1.GetControllerOf(sib)
			if ref == nil || ref.APIVersion != "v1" || ref.Kind != "ResourceQuota" || ref.Name != "gpu" || ref.UID != src.UID || len(sib.OwnerReferences) != 1 {
				t.Errorf("owner references %+v", sib.OwnerReferences)
			}
			if sib.Spec.Scopes != nil || sib.Spec.ScopeSelector != nil {
				t.Errorf("scopes %v %v on an unscoped source", sib.Spec.Scopes, sib.Spec.ScopeSelector)
			}
		})
	}
}

// A scoped quota's sibling is scoped alike (copies, not shared slices).
func TestHAMiQuotaSiblingScoped(t *testing.T) {
	src := hamiSource("gpu", map[string]string{"limits.nvidia.com/gpumem": "40000"})
	src.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotTerminating}
	src.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
		ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"},
	}}}
	sib, _ := HAMiQuotaSibling(src, device.DefaultResourceNames())
	if sib == nil || len(sib.Spec.Scopes) != 1 || sib.Spec.Scopes[0] != corev1.ResourceQuotaScopeNotTerminating ||
		sib.Spec.ScopeSelector == nil || sib.Spec.ScopeSelector.MatchExpressions[0].Values[0] != "high" {
		t.Fatalf("sibling %+v", sib)
	}
	src.Spec.ScopeSelector.MatchExpressions[0].Values[0] = "low"
	src.Spec.Scopes[0] = corev1.ResourceQuotaScopeBestEffort
	if sib.Spec.ScopeSelector.MatchExpressions[0].Values[0] != "high" || sib.Spec.Scopes[0] != corev1.ResourceQuotaScopeNotTerminating {
		t.Fatal("the sibling shares the source's scopes")
	}
}

// A sibling (managed-by hami-go) is never translated, even with HAMi's keys.
func TestHAMiQuotaSiblingOfSibling(t *testing.T) {
	src := hamiSource("gpu-hami-go", map[string]string{"limits.nvidia.com/gpumem": "40000"})
	src.Labels = map[string]string{LabelManagedBy: ManagedByHAMiGo}
	if sib, p := HAMiQuotaSibling(src, device.DefaultResourceNames()); sib != nil || p != nil {
		t.Fatalf("sibling %v problems %v", sib, p)
	}
}

// Names: <source>-hami-go up to 253 characters, else cut short with a hash; always a DNS
// subdomain, distinct for distinct sources; the source label is a valid label value.
func TestHAMiQuotaSiblingName(t *testing.T) {
	if n := HAMiQuotaSiblingName("gpu"); n != "gpu-hami-go" {
		t.Fatalf("%q", n)
	}
	fits := strings.Repeat("a", 253-len(HAMiQuotaSiblingSuffix))
	if n := HAMiQuotaSiblingName(fits); n != fits+"-hami-go" {
		t.Fatalf("%q", n)
	}
	long1 := strings.Repeat("a", 240) + ".b-" + strings.Repeat("c", 10)
	long2 := strings.Repeat("a", 240) + ".b-" + strings.Repeat("d", 10)
	dotted := strings.Repeat("a", 234) + "." + strings.Repeat("e", 18) // the cut falls right after the dot
	seen := map[string]bool{}
	for _, src := range []string{long1, long2, dotted, fits + "x"} {
		n := HAMiQuotaSiblingName(src)
		if len(n) > 253 || !strings.HasSuffix(n, "-hami-go") || seen[n] {
			t.Errorf("%q → %q (%d)", src, n, len(n))
		}
		seen[n] = true
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("%q: %v", n, errs)
		}
		if errs := validation.IsValidLabelValue(hamiQuotaSourceLabel(src)); len(errs) > 0 {
			t.Errorf("label %q: %v", hamiQuotaSourceLabel(src), errs)
		}
	}
}
