package gpuview

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/preflight"
)

// modeSwitches maps each node whose arriving agent waits out a mode switch to what it waits
// for: the message of its preflight condition (preflight.ConditionType) while the reason is
// preflight.FindingOldModeInUse.
func modeSwitches(nodes []corev1.Node) map[string]string {
	out := map[string]string{}
	for i := range nodes {
		for _, c := range nodes[i].Status.Conditions {
			if string(c.Type) == preflight.ConditionType && c.Reason == preflight.FindingOldModeInUse {
				out[nodes[i].Name] = c.Message
			}
		}
	}
	return out
}
