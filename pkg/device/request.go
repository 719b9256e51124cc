package device

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ContainerKind says when a container runs, which decides what it is charged with (case C03).
type ContainerKind string

const (
	// KindInit is a classic init container: it runs alone (beside earlier sidecars) and ends.
	KindInit ContainerKind = "init"
	// KindSidecar is a native sidecar: an init container with restartPolicy Always, running from
	// its start until the pod ends.
	KindSidecar ContainerKind = "sidecar"
	// KindApp is a regular container.
	KindApp ContainerKind = "app"
)

// Policy is a placement policy for nodes (Score) or GPUs (Pick).
type Policy string

const (
	// Binpack prefers the fullest node or GPU that fits (default).
	Binpack Policy = "binpack"
	// Spread prefers the emptiest node or GPU.
	Spread Policy = "spread"
)

// ParsePolicy accepts "binpack", "spread" or "" (= def). field names the value in errors.
func ParsePolicy(field, s string, def Policy) (Policy, error) {
	switch Policy(s) {
	case "":
		return def, nil
	case Binpack, Spread:
		return Policy(s), nil
	}
	return "", fmt.Errorf("%s: %q is not a scheduler policy (binpack or spread)", field, s)
}

// ContainerRequest is what one container asks of the GPU resources.
type ContainerRequest struct {
	// Name is the container's name; allocations are looked up by it, never by position (case C02).
	Name string `json:"name"`
	// Kind is init, sidecar or app.
	Kind ContainerKind `json:"kind"`
	// Count is the number of physical GPUs; each gets a slice. 0 = the container uses no GPU.
	Count int `json:"count"`
	// MemoryMiB is the memory per GPU in MiB; 0 when MemoryPercent is used instead.
	MemoryMiB int64 `json:"memoryMiB,omitempty"`
	// MemoryPercent is the memory per GPU in percent of that GPU's memory (1..100); 0 when
	// MemoryMiB is used. When neither is given the container gets 100%.
	MemoryPercent int `json:"memoryPercent,omitempty"`
	// CoresPercent is the compute per GPU in percent (0..100); 100 = the GPU is exclusive;
	// 0 = no compute share booked (no limit).
	CoresPercent int `json:"coresPercent,omitempty"`
}

// MemoryOn returns the MiB this container books on a GPU of totalMiB (rounding a percentage up,
// case C08). When neither MemoryMiB nor MemoryPercent is set the container books the whole GPU
// (100%), never 0 MiB.
func (c *ContainerRequest) MemoryOn(totalMiB int64) int64 {
	if c.MemoryMiB > 0 {
		return c.MemoryMiB
	}
	pct := c.MemoryPercent
	if pct <= 0 {
		pct = 100
	}
	return PercentOfMiB(totalMiB, pct)
}

// Exclusive reports whether the container needs its GPUs to itself (cores 100%).
func (c *ContainerRequest) Exclusive() bool { return c.CoresPercent >= 100 }

// PodRequest is everything a pod asks of GPUs, parsed from its spec and annotations.
type PodRequest struct {
	// Containers lists every container that uses GPUs, in the kubelet's order: init containers
	// (classic and sidecars) in spec order, then app containers in spec order.
	Containers []ContainerRequest `json:"containers"`
	// UseModels / AvoidModels are model filters by token (case C06); each entry may hold several
	// tokens ("A100-SXM4"), matched as a contiguous run of the model's tokens.
	UseModels   []string `json:"useModels,omitempty"`
	AvoidModels []string `json:"avoidModels,omitempty"`
	// UseUUIDs / AvoidUUIDs are exact GPU UUIDs.
	UseUUIDs   []string `json:"useUUIDs,omitempty"`
	AvoidUUIDs []string `json:"avoidUUIDs,omitempty"`
	// NUMABind requires every multi-GPU container's GPUs to share one NUMA node.
	NUMABind bool `json:"numaBind,omitempty"`
	// GPUPolicy picks GPUs within a node; NodePolicy scores nodes.
	GPUPolicy  Policy `json:"gpuPolicy,omitempty"`
	NodePolicy Policy `json:"nodePolicy,omitempty"`
}

// UsesGPU reports whether any container asks for a GPU.
func (r *PodRequest) UsesGPU() bool { return len(r.Containers) > 0 }

// Phases returns the sets of containers (indexes into Containers) that hold GPUs at the same
// time, by Kubernetes' own rule for a pod's effective request (k8s.io/component-helpers
// resource.PodRequests, case C03): each classic init container runs together with the native
// sidecars declared before it; at the end, all sidecars run with all app containers. A pod is
// charged, per GPU, the largest figure of any phase. Phases with no container are left out.
func (r *PodRequest) Phases() [][]int {
	var phases [][]int
	var sidecars []int
	for i, c := range r.Containers {
		switch c.Kind {
		case KindSidecar:
			sidecars = append(sidecars, i)
		case KindInit:
			phases = append(phases, append(append([]int(nil), sidecars...), i))
		}
	}
	final := append([]int(nil), sidecars...)
	for i, c := range r.Containers {
		if c.Kind == KindApp {
			final = append(final, i)
		}
	}
	if len(final) > 0 {
		phases = append(phases, final)
	}
	return phases
}

// ParsePodRequest reads a pod's GPU request from its containers' limits (requests are used where
// a limit is missing) and its annotations, by the one quantity rule. A count missing where
// memory or cores are given defaults to 1 (the webhook writes the same default). Every error
// names the field and the value; nothing is half-parsed.
func ParsePodRequest(pod *corev1.Pod, names ResourceNames) (PodRequest, error) {
	var r PodRequest
	add := func(c *corev1.Container, kind ContainerKind, path string) error {
		cr, ok, err := parseContainer(c, kind, path, names)
		if err != nil || !ok {
			return err
		}
		r.Containers = append(r.Containers, cr)
		return nil
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		kind := KindInit
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			kind = KindSidecar
		}
		if err := add(c, kind, "spec.initContainers["+c.Name+"]"); err != nil {
			return PodRequest{}, err
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if err := add(c, KindApp, "spec.containers["+c.Name+"]"); err != nil {
			return PodRequest{}, err
		}
	}
	a := pod.Annotations
	r.UseModels = SplitList(a[AnnoUseGPUType])
	r.AvoidModels = SplitList(a[AnnoNoUseGPUType])
	r.UseUUIDs = SplitList(a[AnnoUseGPUUUID])
	r.AvoidUUIDs = SplitList(a[AnnoNoUseGPUUUID])
	var err error
	if r.GPUPolicy, err = ParsePolicy("metadata.annotations["+AnnoGPUPolicy+"]", a[AnnoGPUPolicy], Binpack); err != nil {
		return PodRequest{}, err
	}
	if r.NodePolicy, err = ParsePolicy("metadata.annotations["+AnnoNodePolicy+"]", a[AnnoNodePolicy], Binpack); err != nil {
		return PodRequest{}, err
	}
	switch v := a[AnnoNUMABind]; v {
	case "", "false":
	case "true":
		r.NUMABind = true
	default:
		return PodRequest{}, fmt.Errorf("metadata.annotations[%s]: %q is not true or false", AnnoNUMABind, v)
	}
	return r, nil
}

func parseContainer(c *corev1.Container, kind ContainerKind, path string, names ResourceNames) (ContainerRequest, bool, error) {
	get := func(name string) (string, *resource.Quantity) {
		field := path + ".resources.limits[" + name + "]"
		if q, ok := c.Resources.Limits[corev1.ResourceName(name)]; ok {
			return field, &q
		}
		if q, ok := c.Resources.Requests[corev1.ResourceName(name)]; ok {
			return path + ".resources.requests[" + name + "]", &q
		}
		return field, nil
	}
	cr := ContainerRequest{Name: c.Name, Kind: kind}
	cf, count := get(names.Count)
	mf, mem := get(names.Memory)
	pf, pct := get(names.MemoryPercent)
	kf, cores := get(names.Cores)
	if count == nil && mem == nil && pct == nil && cores == nil {
		return cr, false, nil
	}
	var err error
	if count != nil {
		if count.IsZero() {
			if mem != nil || pct != nil || cores != nil {
				return cr, false, fmt.Errorf("%s: 0, but the container also asks for GPU memory or cores", cf)
			}
			return cr, false, nil
		}
		if cr.Count, err = ParseCount(cf, *count); err != nil {
			return cr, false, err
		}
	} else {
		cr.Count = 1
	}
	if mem != nil && pct != nil {
		return cr, false, fmt.Errorf("%s and %s are both set; set one of them", mf, pf)
	}
	if mem != nil {
		if cr.MemoryMiB, err = ParseMemoryMiB(mf, *mem); err != nil {
			return cr, false, err
		}
	} else if pct != nil {
		if cr.MemoryPercent, err = ParsePercent(pf, *pct, 1); err != nil {
			return cr, false, err
		}
	} else {
		cr.MemoryPercent = 100
	}
	if cores != nil {
		if cr.CoresPercent, err = ParsePercent(kf, *cores, 0); err != nil {
			return cr, false, err
		}
	}
	return cr, true, nil
}
