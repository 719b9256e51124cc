package device

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxGPUMemoryMiB is the largest memory figure (MiB) accepted for one GPU: 4 TiB, far above any
// GPU made, so that a value in the wrong unit ("3000M" = 3,000,000,000 MiB) is caught.
const MaxGPUMemoryMiB = 4 << 20

const mib = 1 << 20

// ParseMemoryMiB applies the one quantity rule for GPU memory (case C07). Kubernetes normalizes
// quantities before anyone reads them (`3000` arrives as `3k`), so the rule rests on value and
// format, never on spelling:
//   - a binary-SI quantity (Ki, Mi, Gi, Ti, ...) is bytes, converted to MiB rounding up
//     (`16Gi` = 16384, `1536Ki` = 2);
//   - any other quantity is a whole number of MiB (`3000` = `3k` = 3000).
//
// field names the value in errors (for example "containers[gpu].resources.limits[nvidia.com/gpumem]").
// Fractions, zero, negative values and values above MaxGPUMemoryMiB are rejected; the error says
// what was probably meant. Nothing is truncated or wrapped.
func ParseMemoryMiB(field string, q resource.Quantity) (int64, error) {
	s := quote(q)
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("%s: %s is not a positive amount of GPU memory (MiB)", field, s)
	}
	// Bound the magnitude first with the cheap float view: exact comparisons of quantities with
	// huge exponents ("9223E72036854775807") would materialize 10^exponent and never return.
	approx := q.AsApproximateFloat64()
	if q.Format == resource.BinarySI {
		if approx > MaxGPUMemoryMiB*mib {
			return 0, fmt.Errorf("%s: %s is more GPU memory than any GPU has (at most %d MiB)", field, s, int64(MaxGPUMemoryMiB))
		}
		bytes := q.Value() // rounds a fractional byte count up
		if bytes > MaxGPUMemoryMiB*mib {
			return 0, fmt.Errorf("%s: %s is more GPU memory than any GPU has (at most %d MiB)", field, s, int64(MaxGPUMemoryMiB))
		}
		return (bytes + mib - 1) / mib, nil
	}
	// Decimal: a whole number of MiB.
	v, whole := q.AsInt64()
	if !whole && approx <= MaxGPUMemoryMiB {
		return 0, fmt.Errorf("%s: %s is not a whole number of MiB (GPU memory is given in MiB, e.g. 3000, or with a binary suffix, e.g. 1536Mi)", field, s)
	}
	if !whole || v > MaxGPUMemoryMiB {
		figure := s
		if whole {
			figure = strconv.FormatInt(v, 10)
		}
		return 0, fmt.Errorf("%s: %s is %s MiB, more than any GPU has (at most %d MiB); did you mean %s?", field, s, figure, int64(MaxGPUMemoryMiB), suggestBinary(q, approx))
	}
	return v, nil
}

// quote is q as an error message shows it: Kubernetes' canonical form (q.String()), followed,
// where a decimal quantity has other spellings, by its figure in millions and in plain digits:
// "3G (Kubernetes' canonical form; = 3000M = 3000000000)", "500m (Kubernetes' canonical form;
// = 0.5)". The form the user typed is not
// available: the API server decodes a request into Go types, and resource.Quantity keeps no
// spelling (k8s.io/apimachinery resource.Quantity.UnmarshalJSON), so an admission webhook's
// AdmissionRequest.Object is the object re-encoded, "3000M" already "3G" (admission
// request.CreateV1AdmissionReview); kube-scheduler's extender sees the same. So the message
// gives every spelling that the user may have typed for the value.
func quote(q resource.Quantity) string {
	s := q.String()
	if q.Format != resource.DecimalSI || q.Sign() == 0 {
		return s
	}
	// Huge or tiny exponents: no plainer spelling, and exact arithmetic on them is costly.
	if a := math.Abs(q.AsApproximateFloat64()); a > 1e18 || a < 1e-3 {
		return s
	}
	var alts []string
	if n := q.ScaledValue(resource.Mega); n != 0 && resource.NewScaledQuantity(n, resource.Mega).Cmp(q) == 0 {
		if m := strconv.FormatInt(n, 10) + "M"; m != s {
			alts = append(alts, m)
		}
	}
	plain := q.AsDec().String()
	if strings.Contains(plain, ".") {
		plain = strings.TrimRight(strings.TrimRight(plain, "0"), ".")
	}
	if plain != s {
		alts = append(alts, plain)
	}
	if len(alts) == 0 {
		return s
	}
	return s + " (Kubernetes' canonical form; = " + strings.Join(alts, " = ") + ")"
}

// suggestBinary names the binary quantity a user probably meant by a decimal-suffixed one that is
// too large to be MiB. Kubernetes has already normalized the spelling ("3000M" arrives as "3G"),
// so both readings are offered: the figure in millions as Mi ("3000M" -> "3000Mi") and, where it
// differs, the largest whole decimal unit made binary ("3G" -> "3Gi"): "3000Mi or 3Gi". Only
// suggestions that are valid GPU memory figures are made.
func suggestBinary(q resource.Quantity, approx float64) string {
	var out []string
	if approx > 2*MaxGPUMemoryMiB*1e12 { // beyond every suggestion; also keeps Cmp cheap
		return "a binary quantity such as 3000Mi"
	}
	if n := q.ScaledValue(resource.Mega); n > 0 && n <= MaxGPUMemoryMiB && resource.NewScaledQuantity(n, resource.Mega).Cmp(q) == 0 {
		out = append(out, strconv.FormatInt(n, 10)+"Mi")
	}
	for _, u := range []struct {
		suffix string
		scale  resource.Scale
		mib    int64
	}{{"Ti", resource.Tera, 1 << 20}, {"Gi", resource.Giga, 1 << 10}, {"Mi", resource.Mega, 1}} {
		n := q.ScaledValue(u.scale)
		if n > 0 && n <= MaxGPUMemoryMiB/u.mib && resource.NewScaledQuantity(n, u.scale).Cmp(q) == 0 {
			if alt := strconv.FormatInt(n, 10) + u.suffix; len(out) == 0 || out[0] != alt {
				out = append(out, alt)
			}
			break
		}
	}
	if len(out) == 0 {
		return "a binary quantity such as 3000Mi"
	}
	return strings.Join(out, " or ")
}

// ParsePercent parses a whole percentage in [lo, 100] (gpumem-percentage: lo = 1, case C08;
// gpucores: lo = 0). field names the value in errors.
func ParsePercent(field string, q resource.Quantity, lo int) (int, error) {
	s := quote(q)
	if q.MilliValue()%1000 != 0 {
		return 0, fmt.Errorf("%s: %s is not a whole percentage", field, s)
	}
	v, ok := q.AsInt64()
	if !ok || v < int64(lo) || v > 100 {
		return 0, fmt.Errorf("%s: %s is outside %d..100 (percent)", field, s, lo)
	}
	return int(v), nil
}

// ParseCount parses a whole, positive GPU count. field names the value in errors.
func ParseCount(field string, q resource.Quantity) (int, error) {
	s := quote(q)
	if q.MilliValue()%1000 != 0 {
		return 0, fmt.Errorf("%s: %s is not a whole number of GPUs", field, s)
	}
	v, ok := q.AsInt64()
	if !ok || v < 1 || v > math.MaxInt16 {
		return 0, fmt.Errorf("%s: %s is not a GPU count between 1 and %d", field, s, math.MaxInt16)
	}
	return int(v), nil
}

// PercentOfMiB returns pct percent of total MiB, rounded up, so a positive share is never booked
// as 0 MiB (case C08: 20% of 24000 = 4800).
func PercentOfMiB(total int64, pct int) int64 {
	return (total*int64(pct) + 99) / 100
}
