package device

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxGPUMemoryMiB is the largest memory figure (MiB) accepted for one GPU: 4 TiB, far above any
// GPU made, so that a value in the wrong unit ("3000M" = 3,000,000,000 MiB) is caught.
const MaxGPUMemoryMiB = 4 << 20

const mib = 1 << 20

var maxBinary = *resource.NewQuantity(MaxGPUMemoryMiB*mib, resource.BinarySI)

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
	s := q.String()
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("%s: %s is not a positive amount of GPU memory (MiB)", field, s)
	}
	if q.Format == resource.BinarySI {
		if q.Cmp(maxBinary) > 0 {
			return 0, fmt.Errorf("%s: %s is more GPU memory than any GPU has (at most %d MiB)", field, s, int64(MaxGPUMemoryMiB))
		}
		bytes := q.Value() // rounds a fractional byte count up
		return (bytes + mib - 1) / mib, nil
	}
	// Decimal: a whole number of MiB.
	if q.MilliValue()%1000 != 0 || (q.Cmp(*resource.NewQuantity(1, resource.DecimalSI)) < 0) {
		return 0, fmt.Errorf("%s: %s is not a whole number of MiB (GPU memory is given in MiB, e.g. 3000, or with a binary suffix, e.g. 1536Mi)", field, s)
	}
	v, ok := q.AsInt64()
	if !ok || v > MaxGPUMemoryMiB {
		return 0, fmt.Errorf("%s: %s is %s MiB, more than any GPU has (at most %d MiB); did you mean %s?", field, s, q.AsDec().String(), int64(MaxGPUMemoryMiB), suggestBinary(q))
	}
	return v, nil
}

// suggestBinary turns a decimal-suffixed quantity into the binary suffix the user probably meant
// ("3000M" -> "3000Mi", "16G" -> "16Gi").
func suggestBinary(q resource.Quantity) string {
	for _, u := range []struct {
		suffix string
		scale  resource.Scale
	}{{"Ti", resource.Tera}, {"Gi", resource.Giga}, {"Mi", resource.Mega}, {"Ki", resource.Kilo}} {
		n := q.ScaledValue(u.scale)
		if resource.NewScaledQuantity(n, u.scale).Cmp(q) == 0 {
			return fmt.Sprintf("%d%s", n, u.suffix)
		}
	}
	return "a binary quantity such as 3000Mi"
}

// ParsePercent parses a whole percentage in [lo, 100] (gpumem-percentage: lo = 1, case C08;
// gpucores: lo = 0). field names the value in errors.
func ParsePercent(field string, q resource.Quantity, lo int) (int, error) {
	s := q.String()
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
	s := q.String()
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
