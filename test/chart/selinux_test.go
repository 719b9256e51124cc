package chart_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// devicePlugin.seLinuxOptions (draDriver.seLinuxOptions for the DRA driver, falling back to it)
// becomes the node agents' container securityContext.seLinuxOptions; nothing by default
// (issue 36 item 5).
func TestAgentsSELinuxOptions(t *testing.T) {
	spc := &corev1.SELinuxOptions{Type: "spc_t"}
	for _, tc := range []struct {
		name string
		set  []string
		key  string
		ctr  string
		want *corev1.SELinuxOptions
	}{
		{"deviceplugin default", nil, dpDS, "device-plugin", nil},
		{"dra default", []string{"mode=dra"}, draDS, "dra-driver", nil},
		{"deviceplugin spc_t", []string{"devicePlugin.seLinuxOptions.type=spc_t"}, dpDS, "device-plugin", spc},
		{"deviceplugin spc_t privileged", []string{"devicePlugin.seLinuxOptions.type=spc_t", "devicePlugin.privileged=true"}, dpDS, "device-plugin", spc},
		{"dra from devicePlugin", []string{"mode=dra", "devicePlugin.seLinuxOptions.type=spc_t"}, draDS, "dra-driver", spc},
		{"dra own", []string{"mode=dra", "devicePlugin.seLinuxOptions.type=spc_t", "draDriver.seLinuxOptions.type=container_runtime_t", "draDriver.seLinuxOptions.level=s0"}, draDS, "dra-driver",
			&corev1.SELinuxOptions{Type: "container_runtime_t", Level: "s0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := container(t, daemonSet(t, renderChart(t, sets(t, tc.set...)), tc.key).Spec.Template.Spec, tc.ctr)
			var got *corev1.SELinuxOptions
			if c.SecurityContext != nil {
				got = c.SecurityContext.SELinuxOptions
			}
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Errorf("seLinuxOptions %+v, want %+v", got, tc.want)
			}
		})
	}
}
