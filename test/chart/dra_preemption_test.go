package chart_test

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// webhook.draPreemption (issue 37 item 11; docs/dra.md, "Preemption in DRA mode"): in mode dra
// the webhook runs --dra-preemption=true with the RBAC it needs (nominate, evict, watch claims
// and budgets, its Lease); false removes flag and rules; mode deviceplugin never has them (the
// extender preempts there).
func TestDRAPreemptionValue(t *testing.T) {
	const role, binding = "Role/hami-go-system/hami-go-webhook-dra-preemption", "RoleBinding/hami-go-system/hami-go-webhook-dra-preemption"
	evict := func(r rendered) bool {
		return ruleSet(typedAs[*rbacv1.ClusterRole](t, r, "ClusterRole/hami-go-webhook").Rules)["|pods/eviction|create"]
	}
	for _, c := range []struct {
		set  []string
		flag string
		rbac bool
	}{
		{[]string{"mode=dra"}, "true", true},
		{[]string{"mode=dra", "webhook.draPreemption=false"}, "", false},
		{nil, "", false},
		{[]string{"webhook.draPreemption=true"}, "", false},
	} {
		r := renderChart(t, sets(t, c.set...))
		if got := whFlag("--dra-preemption")(t, r); got != c.flag {
			t.Errorf("%v: --dra-preemption=%q, want %q", c.set, got, c.flag)
		}
		if evict(r) != c.rbac || r.has(role) != c.rbac || r.has(binding) != c.rbac {
			t.Errorf("%v: eviction rule %v, Lease Role %v, binding %v; want all %v", c.set, evict(r), r.has(role), r.has(binding), c.rbac)
		}
		if c.rbac {
			got := ruleSet(typedAs[*rbacv1.Role](t, r, role).Rules)
			want := []string{"coordination.k8s.io|leases|create", "coordination.k8s.io|leases|get|hami-go-dra-preemption", "coordination.k8s.io|leases|update|hami-go-dra-preemption"}
			if len(got) != len(want) {
				t.Errorf("Lease Role rules %v, want %v", sortedKeys(got), want)
			}
			for _, w := range want {
				if !got[w] {
					t.Errorf("Lease Role lacks %s", w)
				}
			}
			b := typedAs[*rbacv1.RoleBinding](t, r, binding)
			if b.RoleRef.Name != "hami-go-webhook-dra-preemption" || len(b.Subjects) != 1 || b.Subjects[0].Name != "hami-go-webhook" {
				t.Errorf("binding %+v", b)
			}
		}
	}
}
