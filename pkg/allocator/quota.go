package allocator

import "github.com/hami-go/hami-go/pkg/device"

// RequestedMemoryMiB is the GPU memory, MiB, that container c books in total, known before
// placement: Count GPUs × MemoryMiB per GPU. It is the figure ChargeOf sums for c's devices in
// any allocation of c (each of c's GPUs gets MemoryMiB, case C40), so the webhook writes it as
// c's device.ResourceGPUMemory and Kubernetes' effective-request rule (case C03) adds it up per
// pod exactly as Phases does. ok is false when c asks a percentage of each GPU's memory (or no
// memory, which means 100%): its MiB depend on the card it lands on and are not known at
// admission.
func RequestedMemoryMiB(c device.ContainerRequest) (mib int64, ok bool) {
	if c.Count <= 0 {
		return 0, true
	}
	if c.MemoryMiB <= 0 {
		return 0, false
	}
	return int64(c.Count) * c.MemoryMiB, true
}

// EffectiveMemoryMiB is the pod-level figure Kubernetes derives from the per-container
// RequestedMemoryMiB by its effective-request rule (k8s.io/component-helpers resource.PodRequests:
// the largest of each init phase and the final phase, device.PodRequest.Phases, case C03); what
// ResourceQuota and NodeResourcesFit count. Containers whose figure is unknown (a percentage)
// count 0. It never exceeds the sum over GPUs of ChargeOf for any allocation of r (ChargeOf
// takes, per GPU, the largest phase; the sum of per-GPU maxima is at least the largest phase
// sum), and equals it when no classic init container holds a GPU, or when those land on GPUs of
// the final phase.
func EffectiveMemoryMiB(r device.PodRequest) int64 {
	var best int64
	for _, ph := range r.Phases() {
		var sum int64
		for _, i := range ph {
			if m, ok := RequestedMemoryMiB(r.Containers[i]); ok {
				sum += m
			}
		}
		best = max(best, sum)
	}
	return best
}
