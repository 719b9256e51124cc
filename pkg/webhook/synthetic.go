package webhook

import (
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/allocator"
	"github.com/hami-go/hami-go/pkg/device"
)

// Quotas says whether a namespace caps GPU memory (device.QuotaResourceGPUMemory) with a
// ResourceQuota. The webhook asks it only for a container whose memory is a percentage (or not
// given: a whole GPU), which has no MiB figure before placement.
type Quotas interface {
	// GPUMemoryQuota returns the name of a ResourceQuota of namespace whose spec.hard holds
	// requests.hami-go.io/gpu-memory, and whether there is one.
	GPUMemoryQuota(namespace string) (name string, ok bool)
}

// SetQuotas gives the handler the namespaces' quotas (nil: no namespace has one). Call it
// before the handler serves.
func (h *PodHandler) SetQuotas(q Quotas) { h.quotas = q }

// gpuMemory makes hami-go's webhook the only writer of device.ResourceGPUMemory on a pod
// (decoded JSON spec): it removes the resource from every container's limits and requests
// (a tenant's value is never trusted), then, for a GPU pod (request), writes into each GPU
// container's limits and requests its allocator.RequestedMemoryMiB (GPUs × MiB per GPU) plus
// extra[container name] (DRA mode: the claims of classic init containers that hold their GPUs
// for the pod's whole life). Extended resources need requests equal to limits (Kubernetes API
// validation), so both get the same integer. Kubernetes then derives the pod's figure by its
// effective-request rule (allocator.EffectiveMemoryMiB), which ResourceQuota, NodeResourcesFit
// and the kubelet's admission count.
//
// A container whose memory is a percentage of each GPU's (or not given: 100%) has no MiB figure
// before placement. It gets none, and where the pod's namespace has a ResourceQuota on
// requests.hami-go.io/gpu-memory it is refused, naming the field and value: counting it at the
// largest card would make NodeResourcesFit refuse it on nodes of smaller cards where the extender
// would place it, and counting it at 0 would let it past the quota.
func (h *PodHandler) gpuMemory(pod *corev1.Pod, ns string, request *device.PodRequest, spec map[string]any, extra map[string]int64) (notes []string, err error) {
	name := device.ResourceGPUMemory
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
			_, inL := c.Resources.Limits[corev1.ResourceName(name)]
			_, inR := c.Resources.Requests[corev1.ResourceName(name)]
			if !inL && !inR {
				continue
			}
			res := child(item(spec, l.key, i), "resources", false)
			for _, k := range []string{"limits", "requests"} {
				m := child(res, k, false)
				delete(m, name)
				if m != nil && len(m) == 0 {
					delete(res, k)
				}
			}
			notes = append(notes, fmt.Sprintf("spec.%s[%s]: removed the pod's own %s (written by hami-go only)", l.key, c.Name, name))
		}
	}
	if request == nil {
		return notes, nil
	}
	figures := map[string]int64{}
	for _, cr := range request.Containers {
		mib, ok := allocator.RequestedMemoryMiB(cr)
		if !ok {
			if err := h.percentUnderQuota(ns, pod, cr); err != nil {
				return nil, err
			}
			continue
		}
		figures[cr.Name] += mib
	}
	for c, mib := range extra {
		figures[c] += mib
	}
	names := make([]string, 0, len(figures))
	for c := range figures {
		names = append(names, c)
	}
	sort.Strings(names)
	for _, c := range names {
		mib := figures[c]
		r, ok := refs[c]
		if mib <= 0 || !ok {
			continue
		}
		res := child(item(spec, r.key, r.i), "resources", true)
		v := strconv.FormatInt(mib, 10)
		child(res, "limits", true)[name] = v
		child(res, "requests", true)[name] = v
		notes = append(notes, fmt.Sprintf("spec.%s[%s]: %s=%s", r.key, c, name, v))
	}
	return notes, nil
}

// percentUnderQuota refuses container cr, whose GPU memory is a percentage (or not given), when
// namespace ns caps GPU memory with a ResourceQuota; the error names the field and its value.
func (h *PodHandler) percentUnderQuota(ns string, pod *corev1.Pod, cr device.ContainerRequest) error {
	if h.quotas == nil {
		return nil
	}
	q, ok := h.quotas.GPUMemoryQuota(ns)
	if !ok {
		return nil
	}
	path := "spec.containers[" + cr.Name + "]"
	if cr.Kind != device.KindApp {
		path = "spec.initContainers[" + cr.Name + "]"
	}
	n := h.cfg.Names
	what := fmt.Sprintf("%s.resources.limits[%s]: not set (each GPU's whole memory)", path, n.Memory)
	if v, ok := containerQuantity(pod, cr.Name, n.MemoryPercent); ok {
		what = fmt.Sprintf("%s.resources.limits[%s]: %s", path, n.MemoryPercent, v)
	} else if v, ok := containerQuantity(pod, cr.Name, n.Count); ok {
		what = fmt.Sprintf("%s.resources.limits[%s]: %s with no %s (a whole GPU's memory)", path, n.Count, v, n.Memory)
	}
	return fmt.Errorf("%s: namespace %s caps GPU memory in MiB (ResourceQuota %s, %s), and a share of each GPU's memory has no MiB figure before a GPU is chosen; ask in MiB per GPU with %s (e.g. %s: 20000)",
		what, ns, q, device.QuotaResourceGPUMemory, n.Memory, n.Memory)
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

// hasGPUMemory reports whether any container of pod sets device.ResourceGPUMemory.
func hasGPUMemory(pod *corev1.Pod) bool {
	for _, l := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range l {
			if _, ok := c.Resources.Limits[device.ResourceGPUMemory]; ok {
				return true
			}
			if _, ok := c.Resources.Requests[device.ResourceGPUMemory]; ok {
				return true
			}
		}
	}
	return false
}
