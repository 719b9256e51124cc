package device

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateGPUResources returns the errors the API server's own validation gives the GPU resources
// (names) of a pod's containers, with its words and field paths: Kubernetes validates extended
// resources as it does any resource that cannot be over-committed (k8s.io/kubernetes
// pkg/apis/core/validation, ValidateResourceRequirements, v1.37; checked against the local
// cluster's kube-apiserver v1.37.2):
//
//   - each quantity, in limits and requests: "must be greater than or equal to 0", else "must be
//     an integer" (spec.containers[i].resources.limits[<name>]);
//   - a request needs a limit: "Limit must be set for non overcommitable resources"
//     (spec.containers[i].resources.limits, Required);
//   - a request must equal its limit: "must be equal to <name> limit of <limit>"
//     (spec.containers[i].resources.requests, Invalid, the request's value).
//
// In device-plugin mode the API server checks this itself; in DRA mode the webhook moves the
// resources into a claim before the API server sees them, so it checks them first, in both
// modes, so that a pod is refused with the same words whichever mode the cluster runs. The pod is
// the one the webhook receives, after the API server's defaulting (a resource given only as a
// limit has its request copied from it). Errors come in container order, then in the order of
// names' fields (count, memory, memory percent, cores), limits before requests.
func ValidateGPUResources(spec *corev1.PodSpec, names ResourceNames) field.ErrorList {
	gpu := []corev1.ResourceName{
		corev1.ResourceName(names.Count), corev1.ResourceName(names.Memory),
		corev1.ResourceName(names.MemoryPercent), corev1.ResourceName(names.Cores),
	}
	var errs field.ErrorList
	check := func(path *field.Path, c *corev1.Container) {
		limPath, reqPath := path.Child("resources", "limits"), path.Child("resources", "requests")
		for _, l := range []struct {
			path *field.Path
			list corev1.ResourceList
		}{{limPath, c.Resources.Limits}, {reqPath, c.Resources.Requests}} {
			for _, n := range gpu {
				q, ok := l.list[n]
				switch {
				case !ok:
				case q.Sign() < 0:
					errs = append(errs, field.Invalid(l.path.Key(string(n)), q.String(), "must be greater than or equal to 0"))
				case !isInteger(q):
					errs = append(errs, field.Invalid(l.path.Key(string(n)), q.String(), "must be an integer"))
				}
			}
		}
		for _, n := range gpu {
			req, ok := c.Resources.Requests[n]
			if !ok {
				continue
			}
			lim, hasLimit := c.Resources.Limits[n]
			switch {
			case !hasLimit:
				errs = append(errs, field.Required(limPath, "Limit must be set for non overcommitable resources"))
			case !equalQuantities(req, lim):
				errs = append(errs, field.Invalid(reqPath, req.String(), fmt.Sprintf("must be equal to %s limit of %s", n, lim.String())))
			}
		}
	}
	for i := range spec.InitContainers {
		check(field.NewPath("spec", "initContainers").Index(i), &spec.InitContainers[i])
	}
	for i := range spec.Containers {
		check(field.NewPath("spec", "containers").Index(i), &spec.Containers[i])
	}
	return errs
}

// exactBound is the magnitude below which a quantity's exact value is cheap to compute; every
// float64 at or above it is a whole number. Exact arithmetic on a hostile quantity with a huge
// exponent ("9E999999999") would materialize the number (ParseMemoryMiB says the same).
const exactBound = 1 << 53

// isInteger is the API server's "must be an integer" rule for extended resources (the value has
// no fraction: MilliValue divisible by 1000), without exact arithmetic on huge values.
func isInteger(q resource.Quantity) bool {
	if math.Abs(q.AsApproximateFloat64()) >= exactBound {
		return true
	}
	return q.MilliValue()%1000 == 0
}

// equalQuantities compares two quantities exactly when both are small enough to, and by their
// approximate values otherwise.
func equalQuantities(a, b resource.Quantity) bool {
	fa, fb := a.AsApproximateFloat64(), b.AsApproximateFloat64()
	if math.Abs(fa) >= exactBound || math.Abs(fb) >= exactBound {
		return fa == fb
	}
	return a.Cmp(b) == 0
}
