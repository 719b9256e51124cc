package webhook

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// Quotas says whether a namespace caps one of hami-go's synthetic resources
// (device.QuotaResourceGPUMemory, device.QuotaResourceGPUCores) with a ResourceQuota. The webhook
// asks it only for a container that has no figure of that resource before placement.
type Quotas interface {
	// Quota returns the name of a ResourceQuota of namespace whose spec.hard holds key, and
	// whether there is one.
	Quota(namespace string, key corev1.ResourceName) (name string, ok bool)
}

// SetQuotas gives the handler the namespaces' quotas (nil: no namespace has one). Call it
// before the handler serves.
func (h *PodHandler) SetQuotas(q Quotas) { h.quotas = q }

// synthetic is one of hami-go's synthetic extended resources: written on pods by hami-go's
// webhook only, on nodes by the node agents only, so that ResourceQuota, NodeResourcesFit and
// the kubelet's admission count it (docs/design.md, "GPU memory as a synthetic extended
// resource").
type synthetic struct {
	name  corev1.ResourceName // on pods and nodes
	quota corev1.ResourceName // the ResourceQuota key that caps it
	// figure is container c's total (GPUs × per-GPU amount), known before placement; ok false:
	// what c holds has no figure before a GPU is chosen.
	figure func(c device.ContainerRequest) (v int64, ok bool)
	// unknown says why c, whose figure is unknown (or understated), cannot be counted under a
	// quota on the resource ("" when it can): the field and its value, what c holds, and what
	// to ask instead.
	unknown func(h *PodHandler, pod *corev1.Pod, path string, c device.ContainerRequest) string
}

// synthetics are the resources the webhook writes, in the order it checks them.
var synthetics = []synthetic{
	{name: device.ResourceGPUMemory, quota: device.QuotaResourceGPUMemory, figure: device.RequestedMemoryMiB, unknown: (*PodHandler).memoryUnknown},
	{name: device.ResourceGPUCores, quota: device.QuotaResourceGPUCores, figure: device.RequestedCoresPercent, unknown: (*PodHandler).coresUnknown},
}

// syntheticResources makes hami-go's webhook the only writer of its synthetic resources
// (device.ResourceGPUMemory, MiB; device.ResourceGPUCores, percent of a GPU) on a pod (decoded
// JSON spec): it removes them from every container's limits and requests (a tenant's value is
// never trusted), then, for a GPU pod (request), writes into each GPU container's limits and
// requests its figure (device.RequestedMemoryMiB: GPUs × MiB per GPU;
// device.RequestedCoresPercent: GPUs × cores per GPU) plus the figures of extra[container name]
// (DRA mode: the claims of classic init containers that hold their GPUs for the pod's whole
// life). Extended resources need requests equal to limits (Kubernetes API validation), so both
// get the same integer. Kubernetes then derives the pod's figure by its effective-request rule
// (device.EffectiveMemoryMiB), which ResourceQuota, NodeResourcesFit and the kubelet's admission
// count.
//
// What a container holds may have no figure before placement: a percentage of each GPU's memory
// (or none given: 100%), an exclusive GPU (cores 100: the whole card's memory, whatever MiB it
// asks), no cores limit (every SM). Such a container gets no figure of that resource (or its
// understated one), and where the pod's namespace has a ResourceQuota on the resource it is
// refused, naming the field and value: counting it at the largest card would make
// NodeResourcesFit refuse it on nodes of smaller cards where the extender would place it, and
// counting it at its figure would let it past the quota (issue 37: `gpucores: 100` with
// `gpumem: 1` held a whole GPU for 1 MiB of quota).
func (h *PodHandler) syntheticResources(pod *corev1.Pod, ns string, request *device.PodRequest, spec map[string]any, extra map[string][]device.ContainerRequest) (notes []string, err error) {
	type ctrRef struct {
		key string
		i   int
	}
	refs := map[string]ctrRef{}
	for _, l := range []struct {
		key string
		cs  []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i, c := range l.cs {
			refs[c.Name] = ctrRef{l.key, i}
			for _, r := range synthetics {
				_, inL := c.Resources.Limits[r.name]
				_, inR := c.Resources.Requests[r.name]
				if !inL && !inR {
					continue
				}
				res := child(item(spec, l.key, i), "resources", false)
				for _, k := range []string{"limits", "requests"} {
					m := child(res, k, false)
					delete(m, string(r.name))
					if m != nil && len(m) == 0 {
						delete(res, k)
					}
				}
				notes = append(notes, fmt.Sprintf("spec.%s[%s]: removed the pod's own %s (written by hami-go only)", l.key, c.Name, r.name))
			}
		}
	}
	if request == nil {
		return notes, nil
	}
	for _, r := range synthetics {
		figures := map[string]int64{}
		for _, cr := range request.Containers {
			if err := h.underQuota(ns, pod, r, cr); err != nil {
				return nil, err
			}
			if v, ok := r.figure(cr); ok {
				figures[cr.Name] += v
			}
		}
		for c, crs := range extra {
			for _, cr := range crs {
				v, _ := r.figure(cr) // unknown: refused above, under a quota, as the init container's own
				figures[c] += v
			}
		}
		for _, c := range slices.Sorted(maps.Keys(figures)) {
			v := figures[c]
			ref, ok := refs[c]
			if v <= 0 || !ok {
				continue
			}
			res := child(item(spec, ref.key, ref.i), "resources", true)
			s := strconv.FormatInt(v, 10)
			child(res, "limits", true)[string(r.name)] = s
			child(res, "requests", true)[string(r.name)] = s
			notes = append(notes, fmt.Sprintf("spec.%s[%s]: %s=%s", ref.key, c, r.name, s))
		}
	}
	return notes, nil
}

// underQuota refuses container cr when what it holds of resource r has no figure and namespace
// ns caps r with a ResourceQuota; the error names the field and its value.
func (h *PodHandler) underQuota(ns string, pod *corev1.Pod, r synthetic, cr device.ContainerRequest) error {
	if h.quotas == nil || cr.Count <= 0 {
		return nil
	}
	path := "spec.containers[" + cr.Name + "]"
	if cr.Kind != device.KindApp {
		path = "spec.initContainers[" + cr.Name + "]"
	}
	why := r.unknown(h, pod, path, cr)
	if why == "" {
		return nil
	}
	q, ok := h.quotas.Quota(ns, r.quota)
	if !ok {
		return nil
	}
	return fmt.Errorf(why, ns, q+", "+string(r.quota))
}

// memoryUnknown is synthetic.unknown for GPU memory: a percentage (or no memory: 100%), or an
// exclusive GPU. The result is a format with the namespace and the quota as its two verbs.
func (h *PodHandler) memoryUnknown(pod *corev1.Pod, path string, cr device.ContainerRequest) string {
	n := h.cfg.Names
	ask := fmt.Sprintf("ask in MiB per GPU with %s (e.g. %s: 20000)", n.Memory, n.Memory)
	var what string
	switch {
	case cr.Exclusive():
		v, _ := containerQuantity(pod, cr.Name, n.Cores)
		what = fmt.Sprintf("%s.resources.limits[%s]: %s (an exclusive GPU, whose whole memory it holds whatever %s says)", path, n.Cores, v, n.Memory)
		ask = fmt.Sprintf("ask fewer than 100 %s to share the GPU", n.Cores)
	case cr.MemoryMiB > 0:
		return ""
	default:
		what = fmt.Sprintf("%s.resources.limits[%s]: not set (each GPU's whole memory)", path, n.Memory)
		if v, ok := containerQuantity(pod, cr.Name, n.MemoryPercent); ok {
			what = fmt.Sprintf("%s.resources.limits[%s]: %s", path, n.MemoryPercent, v)
		} else if v, ok := containerQuantity(pod, cr.Name, n.Count); ok {
			what = fmt.Sprintf("%s.resources.limits[%s]: %s with no %s (a whole GPU's memory)", path, n.Count, v, n.Memory)
		}
	}
	return what + ": namespace %s caps GPU memory in MiB (ResourceQuota %s), and a share of each GPU's memory has no MiB figure before a GPU is chosen; " + ask
}

// coresUnknown is synthetic.unknown for GPU compute: a container with no cores limit.
func (h *PodHandler) coresUnknown(_ *corev1.Pod, path string, cr device.ContainerRequest) string {
	if cr.CoresPercent > 0 {
		return ""
	}
	n := h.cfg.Names
	return fmt.Sprintf("%s.resources.limits[%s]: not set (no compute limit: every SM of each GPU)", path, n.Cores) +
		": namespace %s caps GPU compute in percent of a GPU (ResourceQuota %s), and a container without a compute limit has no figure; " +
		fmt.Sprintf("ask a percentage per GPU with %s (e.g. %s: 30)", n.Cores, n.Cores)
}

// containerQuantity returns the limit (or else request) name of the container named c.
func containerQuantity(pod *corev1.Pod, c, name string) (string, bool) {
	for _, l := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, x := range l {
			if x.Name != c {
				continue
			}
			if q, ok := x.Resources.Limits[corev1.ResourceName(name)]; ok {
				return q.String(), true
			}
			if q, ok := x.Resources.Requests[corev1.ResourceName(name)]; ok {
				return q.String(), true
			}
		}
	}
	return "", false
}

// hasSynthetic reports whether any container of pod sets one of the synthetic resources.
func hasSynthetic(pod *corev1.Pod) bool {
	for _, l := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range l {
			for _, r := range synthetics {
				_, inL := c.Resources.Limits[r.name]
				_, inR := c.Resources.Requests[r.name]
				if inL || inR {
					return true
				}
			}
		}
	}
	return false
}
