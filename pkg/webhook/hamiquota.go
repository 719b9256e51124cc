package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// HAMi's quota keys. HAMi's scheduler caps a namespace's GPU memory and compute with the
// ResourceQuota keys limits.<memory name> and limits.<cores name> (counted per device × count),
// and HAMi's user guide spells them limit.<name>. The API server accepts these keys and counts
// none of them. hami-go honours them through a sibling ResourceQuota it owns, on the synthetic
// resources its webhook writes on every GPU container (HAMiQuotaSibling; the controller in
// hamiquota_controller.go keeps it in step).
const (
	// LabelManagedBy and ManagedByHAMiGo mark a sibling quota (and keep it from being translated
	// in turn).
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedByHAMiGo = "hami-go"
	// LabelHAMiQuotaSource names the sibling's source ResourceQuota (its name, or where that is
	// no label value, hash-<10 hex digits of its SHA-256>); AnnotationHAMiQuotaSource always
	// holds the full name.
	LabelHAMiQuotaSource      = "hami-go.io/hami-quota-source"
	AnnotationHAMiQuotaSource = "hami-go.io/hami-quota-source"
	// HAMiQuotaSiblingSuffix ends a sibling's name: <source>-hami-go.
	HAMiQuotaSiblingSuffix = "-hami-go"
)

// HAMiQuotaProblem is a HAMi key the translation left out: its value is no whole, non-negative
// number (of MiB for memory, of percent for cores).
type HAMiQuotaProblem struct {
	Key   corev1.ResourceName // the source's key, e.g. limits.nvidia.com/gpumem
	Value string              // the value as written
	Why   string
}

func (p HAMiQuotaProblem) String() string {
	return fmt.Sprintf("spec.hard[%s]: %s %s", p.Key, p.Value, p.Why)
}

// IsHAMiQuotaSibling reports whether q carries hami-go's managed-by label (a sibling, or
// something posing as one): such a quota is never translated.
func IsHAMiQuotaSibling(q *corev1.ResourceQuota) bool {
	return q.Labels[LabelManagedBy] == ManagedByHAMiGo
}

// HAMiQuotaSiblingName is the sibling's name: <source>-hami-go, or where that passes 253
// characters (a DNS subdomain's limit), the source's name cut short, a hash of the whole name,
// and the suffix.
func HAMiQuotaSiblingName(source string) string {
	if n := source + HAMiQuotaSiblingSuffix; len(n) <= 253 {
		return n
	}
	h := shortHash(source)
	keep := 253 - len(HAMiQuotaSiblingSuffix) - 1 - len(h)
	prefix := strings.TrimRight(source[:keep], "-.") // a label of a subdomain ends alphanumeric
	return prefix + "-" + h + HAMiQuotaSiblingSuffix
}

// hamiQuotaSourceLabel is LabelHAMiQuotaSource's value for source.
func hamiQuotaSourceLabel(source string) string {
	if len(source) <= 63 {
		return source
	}
	return "hash-" + shortHash(source)
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:10]
}

// HAMiQuotaSibling translates src, a ResourceQuota a user wrote, into the sibling hami-go keeps
// beside it: limits.<names.Memory> and limit.<names.Memory> become requests.hami-go.io/gpu-memory,
// limits.<names.Cores> and limit.<names.Cores> become requests.hami-go.io/gpu-cores (where both
// spellings are there, the smaller value). The sibling lives in src's namespace, is named by
// HAMiQuotaSiblingName, carries the managed-by and source labels and a controller owner
// reference to src (garbage collection deletes it with src), and copies src's scopes and scope
// selector. It is nil where src has none of the keys (or only invalid values: problems lists
// those) and where src is itself a sibling.
//
// Values: HAMi's gpumem is MiB as a plain integer and gpucores percent (× GPUs), so the value
// is kept as the integer it is ("40000", "40k"). A fraction, a negative number and a binary-SI
// quantity ("40Gi": bytes or MiB? HAMi would read 42949672960 MiB) are problems and left out.
func HAMiQuotaSibling(src *corev1.ResourceQuota, names device.ResourceNames) (sib *corev1.ResourceQuota, problems []HAMiQuotaProblem) {
	if src == nil || IsHAMiQuotaSibling(src) {
		return nil, nil
	}
	hard := corev1.ResourceList{}
	for _, m := range []struct {
		name string
		to   corev1.ResourceName
	}{{names.Memory, device.QuotaResourceGPUMemory}, {names.Cores, device.QuotaResourceGPUCores}} {
		if m.name == "" {
			continue
		}
		var best *int64
		for _, k := range []corev1.ResourceName{corev1.ResourceName("limits." + m.name), corev1.ResourceName("limit." + m.name)} {
			q, ok := src.Spec.Hard[k]
			if !ok {
				continue
			}
			v, why := hamiQuotaValue(q)
			if why != "" {
				problems = append(problems, HAMiQuotaProblem{Key: k, Value: q.String(), Why: why})
				continue
			}
			if best == nil || v < *best {
				best = &v
			}
		}
		if best != nil {
			hard[m.to] = *resource.NewQuantity(*best, resource.DecimalSI)
		}
	}
	if len(hard) == 0 {
		return nil, problems
	}
	sib = &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{
			Name:        HAMiQuotaSiblingName(src.Name),
			Namespace:   src.Namespace,
			Labels:      map[string]string{LabelManagedBy: ManagedByHAMiGo, LabelHAMiQuotaSource: hamiQuotaSourceLabel(src.Name)},
			Annotations: map[string]string{AnnotationHAMiQuotaSource: src.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "ResourceQuota",
				Name:       src.Name,
				UID:        src.UID,
				Controller: ptrTo(true),
			}},
		},
		Spec: corev1.ResourceQuotaSpec{Hard: hard},
	}
	if len(src.Spec.Scopes) > 0 {
		sib.Spec.Scopes = append([]corev1.ResourceQuotaScope(nil), src.Spec.Scopes...)
	}
	if src.Spec.ScopeSelector != nil {
		sib.Spec.ScopeSelector = src.Spec.ScopeSelector.DeepCopy()
	}
	return sib, problems
}

// hamiQuotaValue is q as a whole, non-negative number, or why it is none.
func hamiQuotaValue(q resource.Quantity) (int64, string) {
	if q.Format == resource.BinarySI {
		return 0, "has a binary suffix; HAMi's quota values are plain integers (MiB for memory, percent for cores)"
	}
	if q.Sign() < 0 {
		return 0, "is negative"
	}
	v, ok := q.AsInt64()
	if !ok {
		return 0, "is not a whole number (HAMi's quota values are plain integers: MiB for memory, percent for cores)"
	}
	return v, ""
}

func ptrTo[T any](v T) *T { return &v }
