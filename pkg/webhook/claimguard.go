package webhook

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// borrowedClaimError refuses a pod that arrives already naming one of hami-go's GPU claims:
// a ResourceClaimTemplate of the webhook (TemplatePrefix) or a claim generated from one
// (kube-controller-manager names it `<pod>-<pod claim name>-<suffix>`, and the webhook's pod
// claim names start with podClaimPrefix). Only the webhook writes those into a pod, from the
// pod's GPU limits, together with the pod's figures of the synthetic resources; a pod that
// names one itself would get a GPU slice that no ResourceQuota counts (a template's memory with
// no hami-go.io/gpu-memory, or a share of another pod's claim: issue 37 item 4). The webhook
// is called for such a pod (the chart's matchConditions), in both modes; claims and templates
// on the DeviceClass that others create are refused by the chart's ValidatingAdmissionPolicy
// `<release>-gpu-claims`, and pods labelled hami-go.io/ignore=true that name one by
// `<release>-gpu-memory`. The error names the field and value.
func borrowedClaimError(spec *corev1.PodSpec, n device.ResourceNames) error {
	for i, c := range spec.ResourceClaims {
		var field, name string
		switch {
		case c.ResourceClaimTemplateName != nil && strings.HasPrefix(*c.ResourceClaimTemplateName, TemplatePrefix):
			field, name = "resourceClaimTemplateName", *c.ResourceClaimTemplateName
		case c.ResourceClaimName != nil && strings.Contains(*c.ResourceClaimName, podClaimPrefix):
			field, name = "resourceClaimName", *c.ResourceClaimName
		default:
			continue
		}
		return fmt.Errorf("spec.resourceClaims[%d] (%s).%s: %q is one of hami-go's GPU claims (DeviceClass %s), which hami-go's webhook alone writes into a pod from its GPU resource limits: ask for the slice with resources.limits (e.g. %s: 1, %s: 20000) instead of naming the claim",
			i, c.Name, field, name, draapi.DriverName, n.Count, n.Memory)
	}
	return nil
}
