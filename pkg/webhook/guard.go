package webhook

import (
	"fmt"
	"net/http"
	"runtime/debug"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"k8s.io/klog/v2"
)

// review runs one admission handler body for resource ("pods", "rayclusters"): a panic is
// recovered and answered with a denial that gives the reason (never a half-applied patch), and
// the result is counted and logged.
func review(m *Metrics, resource string, req admission.Request, f func() admission.Response) (resp admission.Response) {
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(fmt.Errorf("panic: %v", r), "Admission handler panicked", "resource", resource, "namespace", req.Namespace, "name", req.Name, "uid", req.UID, "stack", string(debug.Stack()))
			resp = admission.Denied(fmt.Sprintf("hami-go webhook: internal error while reviewing this %s: %v", resource, r))
		}
		result := resultAllowed
		switch {
		case !resp.Allowed:
			result = resultDenied
			klog.V(1).InfoS("Denied", "resource", resource, "namespace", req.Namespace, "name", req.Name, "reason", resp.Result.Message)
		case len(resp.Patches) > 0:
			result = resultPatched
			klog.V(2).InfoS("Patched", "resource", resource, "namespace", req.Namespace, "name", req.Name, "operations", len(resp.Patches), "message", resp.Result.Message)
		default:
			klog.V(4).InfoS("Allowed", "resource", resource, "namespace", req.Namespace, "name", req.Name, "message", resp.Result.Message)
		}
		if m != nil {
			m.Admissions.WithLabelValues(resource, result).Inc()
		}
	}()
	return f()
}

// badRequest answers an object that cannot be decoded.
func badRequest(what string, err error) admission.Response {
	return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the %s: %w", what, err))
}
