package device

import (
	"strconv"
	"strings"
)

// CallKey is what the kubelet's first Allocate call for a pod carries: the resource name and the
// number of device IDs (the count of the first container that uses GPUs, in the kubelet's order:
// init containers, then app containers). Pods with different call keys can never be confused by
// the device plugin, whatever order the kubelet admits them in.
type CallKey struct {
	// Resource is the count resource name, e.g. "nvidia.com/gpu".
	Resource string
	// Count is the number of device IDs in the first Allocate call.
	Count int
}

// String renders the key as "<resource>/<count>", for logs and metrics labels.
func (k CallKey) String() string { return k.Resource + "/" + strconv.Itoa(k.Count) }

// KeyOf returns the call key of a request; ok is false when the pod uses no GPU.
func KeyOf(r *PodRequest, names ResourceNames) (CallKey, bool) {
	if len(r.Containers) == 0 {
		return CallKey{}, false
	}
	return CallKey{Resource: names.Count, Count: r.Containers[0].Count}, true
}

// Signature is a pod's full per-container request in kubelet order (kind, count, MiB or percent,
// cores) plus its constraints, as a canonical string. Pods in flight on one node with equal
// signatures are interchangeable: any of them may take any of their allocation slots, because
// every GPU's totals come out the same. Container names are not part of it: Allocate never sees
// them. Pods with equal call keys but different signatures could be confused, so the extender
// never lets two of them be in flight on one node at once (case C20).
type Signature string

// SignatureOf returns the canonical signature of a request.
func SignatureOf(r *PodRequest) Signature {
	var b strings.Builder
	for _, c := range r.Containers {
		b.WriteString(string(c.Kind))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(c.Count))
		b.WriteByte('x')
		if c.MemoryMiB > 0 {
			b.WriteString(strconv.FormatInt(c.MemoryMiB, 10))
			b.WriteString("Mi")
		} else {
			b.WriteString(strconv.Itoa(c.MemoryPercent))
			b.WriteByte('%')
		}
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(c.CoresPercent))
		b.WriteByte(';')
	}
	// Constraints change which slots a pod may take, so they are part of interchangeability.
	for _, l := range [][]string{r.UseModels, r.AvoidModels, r.UseUUIDs, r.AvoidUUIDs} {
		b.WriteByte('|')
		b.WriteString(strings.Join(l, ","))
	}
	if r.NUMABind {
		b.WriteString("|numa")
	}
	return Signature(b.String())
}
