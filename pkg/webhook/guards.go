package webhook

import (
	"encoding/json"
	"fmt"
	"sort"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/hami-go/hami-go/pkg/device"
)

// SubresourceEphemeral is the pods subresource through which `kubectl debug` adds ephemeral
// containers (an UPDATE of pods/ephemeralcontainers; Kubernetes API, "Ephemeral Containers").
const SubresourceEphemeral = "ephemeralcontainers"

// misplacedResourceAnnotations returns one message per annotation whose key is a slice resource
// name (case C39): hami-go reads those only from resources.limits, so as annotations they are
// ignored and the pod would get other GPU figures than its author meant (with only the count
// resource in its limits, a whole GPU). Keys are reported in sorted order.
func misplacedResourceAnnotations(a map[string]string, n device.ResourceNames) []string {
	names := map[string]bool{n.Count: true, n.Memory: true, n.MemoryPercent: true, n.Cores: true}
	var keys []string
	for k := range a {
		if names[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	msgs := make([]string, 0, len(keys))
	for _, k := range keys {
		msgs = append(msgs, fmt.Sprintf("metadata.annotations[%s]: %q is a GPU resource, which hami-go reads only from a container's resources.limits; as an annotation it is ignored (the pod would not get this %s). Move it to spec.containers[*].resources.limits, e.g. `%s: %q`", k, a[k], k, k, a[k]))
	}
	return msgs
}

// ephemeralUpdate reviews an UPDATE of pods/ephemeralcontainers: the ephemeral containers the
// request adds (names not in the old pod) may not set protected env (case C37). Ephemeral
// containers cannot be changed or removed once added, so the old ones are not looked at again.
func (h *PodHandler) ephemeralUpdate(req admission.Request) admission.Response {
	var pod, old corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return badRequest("pod", err)
	}
	if len(req.OldObject.Raw) > 0 {
		if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return badRequest("old pod", err)
		}
	}
	had := map[string]bool{}
	for _, c := range old.Spec.EphemeralContainers {
		had[c.Name] = true
	}
	var added []corev1.EphemeralContainer
	for _, c := range pod.Spec.EphemeralContainers {
		if !had[c.Name] {
			added = append(added, c)
		}
	}
	if err := h.protectedEnvError(&corev1.PodSpec{EphemeralContainers: added}); err != nil {
		return admission.Denied(err.Error())
	}
	return admission.Allowed("hami-go: ephemeral containers set no protected env")
}

// isEphemeralUpdate reports whether req adds ephemeral containers.
func isEphemeralUpdate(req admission.Request) bool {
	return req.Operation == admissionv1.Update && req.SubResource == SubresourceEphemeral
}
