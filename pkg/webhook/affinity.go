package webhook

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/hami-go/hami-go/pkg/device"
)

// gpuMemoryAffinity (Config.GPUMemoryNodeAffinity, device-plugin mode) makes a GPU pod's
// per-GPU memory a node constraint that autoscalers read: a required node affinity
// `nvidia.com/gpu.memory Gt <MiB − 1>` (device.LabelGPUMemory, the GFD label the device plugin
// writes: the first GPU's memory, MiB), where MiB is the largest per-GPU memory a GPU container
// of the pod asks in MiB. Cluster Autoscaler and Karpenter size a node group by its template's
// totals, which say nothing of per-GPU fit: without the constraint a pod of 1 GPU × 60000 MiB
// makes them add a node of 40 GiB cards, where the extender then keeps it Pending (issue 25,
// docs/autoscaler-trial.txt). The requirement is added to each of the pod's required node
// selector terms (terms are ORed; a term is added when there is none), so it holds whichever
// term matches. Containers asking a percentage (or whole GPUs) fit any card and add nothing.
// The label is the card's own memory: on nodes with --memory-scaling above 1 the constraint is
// stricter than the extender (a pod that would fit an oversubscribed smaller card is kept off
// it), with --reserved-memory looser (the extender still refuses). It reports the note for the
// admission message, empty when nothing was added.
func gpuMemoryAffinity(spec map[string]any, request *device.PodRequest) string {
	var mib int64
	for _, c := range request.Containers {
		if c.Count > 0 && c.MemoryMiB > 0 {
			mib = max(mib, c.MemoryMiB)
		}
	}
	if mib == 0 {
		return ""
	}
	expr := map[string]any{"key": device.LabelGPUMemory, "operator": string(corev1.NodeSelectorOpGt), "values": []any{strconv.FormatInt(mib-1, 10)}}
	required := child(child(child(spec, "affinity", true), "nodeAffinity", true), "requiredDuringSchedulingIgnoredDuringExecution", true)
	terms, _ := required["nodeSelectorTerms"].([]any)
	if len(terms) == 0 {
		terms = []any{map[string]any{}}
	}
	for _, t := range terms {
		term, ok := t.(map[string]any)
		if !ok {
			continue // not an object: the API server refuses the pod
		}
		exprs, _ := term["matchExpressions"].([]any)
		term["matchExpressions"] = append(exprs, expr)
	}
	required["nodeSelectorTerms"] = terms
	return fmt.Sprintf("spec.affinity: node %s > %d MiB (a GPU of %d MiB or more, for autoscalers)", device.LabelGPUMemory, mib-1, mib)
}
