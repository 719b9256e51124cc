package webhook

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// validateAnnotations checks the user annotations that device.ParsePodRequest reads as lists
// (policies and numa-bind it checks itself), and refuses the internal allocation annotations on
// a new pod (only the extender and the device plugin write them). Errors name the field and value.
func validateAnnotations(a map[string]string) error {
	field := func(k string) string { return "metadata.annotations[" + k + "]" }
	models := map[string][]string{}
	for _, k := range []string{device.AnnoUseGPUType, device.AnnoNoUseGPUType} {
		for _, e := range device.SplitList(a[k]) {
			if len(device.ModelTokens(e)) == 0 {
				return fmt.Errorf("%s: %q has no model token (letters or digits), e.g. A100 or H100-SXM", field(k), e)
			}
			models[k] = append(models[k], strings.Join(device.ModelTokens(e), "-"))
		}
	}
	if both := common(models[device.AnnoUseGPUType], models[device.AnnoNoUseGPUType]); both != "" {
		return fmt.Errorf("%s and %s both name %q; no GPU could match", field(device.AnnoUseGPUType), field(device.AnnoNoUseGPUType), both)
	}
	uuids := map[string][]string{}
	for _, k := range []string{device.AnnoUseGPUUUID, device.AnnoNoUseGPUUUID} {
		for _, e := range device.SplitList(a[k]) {
			if strings.ContainsAny(e, " \t\n") || strings.Contains(e, "::") {
				return fmt.Errorf("%s: %q is not a GPU UUID (e.g. GPU-8d2c...)", field(k), e)
			}
			uuids[k] = append(uuids[k], e)
		}
	}
	if both := common(uuids[device.AnnoUseGPUUUID], uuids[device.AnnoNoUseGPUUUID]); both != "" {
		return fmt.Errorf("%s and %s both name %q", field(device.AnnoUseGPUUUID), field(device.AnnoNoUseGPUUUID), both)
	}
	for _, k := range []string{device.AnnoPlanned, device.AnnoClaimed} {
		if _, ok := a[k]; ok {
			return fmt.Errorf("%s: set on a new pod; only hami-go writes it (remove it from the pod template)", field(k))
		}
	}
	return nil
}

// privilegedContainer returns the field of the first privileged container of any kind (init,
// sidecar, app), "" when none (case C25: one rule for all of them).
func privilegedContainer(spec *corev1.PodSpec) string {
	for _, l := range []struct {
		path string
		cs   []corev1.Container
	}{{"spec.initContainers", spec.InitContainers}, {"spec.containers", spec.Containers}} {
		for _, c := range l.cs {
			if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				return fmt.Sprintf("%s[%s].securityContext.privileged", l.path, c.Name)
			}
		}
	}
	return ""
}

func common(a, b []string) string {
	for _, x := range a {
		for _, y := range b {
			if strings.EqualFold(x, y) {
				return x
			}
		}
	}
	return ""
}
