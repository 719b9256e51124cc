package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/hami-go/hami-go/pkg/device"
)

// draClaims is DRA mode's part of a GPU pod's review: it plans the pod's claims (planClaims),
// makes sure their templates exist (TemplateStore.Ensure; not for a dry-run request, whose
// webhook configuration says sideEffects NoneOnDryRun), and writes the claims into spec (the
// pod as decoded JSON) in place of the GPU limits. A preset spec.nodeName is refused: such a
// pod bypasses kube-scheduler, which allocates claims, so it would wait for ever. Errors name
// field and value; on any error nothing is created for this pod beyond templates already made
// (they are shared and harmless; docs/dra.md, "Pod API in DRA mode").
//
// extra is what the synthetic resources (syntheticResources) must add to the first app
// container: the requests of the classic init containers that hold claims alone (planClaims),
// which stay reserved for the pod's life on top of the app containers' claims.
func (h *PodHandler) draClaims(ctx context.Context, req admission.Request, pod *corev1.Pod, r *device.PodRequest, spec map[string]any) (notes, warnings []string, extra map[string][]device.ContainerRequest, err error) {
	for _, k := range []string{device.AnnoGPUPolicy, device.AnnoNodePolicy} {
		if v, ok := pod.Annotations[k]; ok {
			warnings = append(warnings, fmt.Sprintf("metadata.annotations[%s]: %q has no effect in DRA mode (kube-scheduler picks nodes by its own scores and devices first-fit; docs/dra.md)", k, v))
		}
	}
	if pod.Spec.NodeName != "" {
		return nil, nil, nil, fmt.Errorf("spec.nodeName: preset to %q; a pod that uses GPU slices gets them through ResourceClaims, which only kube-scheduler allocates, so it must not bypass the scheduler (remove spec.nodeName and pin the node with a nodeSelector, e.g. kubernetes.io/hostname: %s)", pod.Spec.NodeName, pod.Spec.NodeName)
	}
	if h.store == nil {
		return nil, nil, nil, fmt.Errorf("hami-go webhook: DRA mode without a template store (internal error)")
	}
	if s := h.cfg.DRASchedulerName; s != "" && (pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == DefaultScheduler) {
		// a profile of the same kube-scheduler (one process allocates claims): it packs nodes
		spec["schedulerName"] = s
		notes = append(notes, "spec.schedulerName="+s)
	}
	ns := pod.Namespace
	if ns == "" {
		ns = req.Namespace
	}
	p := *pod
	p.Namespace = ns
	plan, err := planClaims(&p, r, h.fleet)
	if err != nil {
		return nil, nil, nil, err
	}
	dryRun := req.DryRun != nil && *req.DryRun
	if !dryRun {
		for _, t := range plan.templates {
			if err := h.store.Ensure(ctx, t); err != nil {
				return nil, nil, nil, fmt.Errorf("hami-go webhook: %v", err)
			}
		}
	}
	if len(plan.ownInit) > 0 && len(pod.Spec.Containers) > 0 {
		extra = map[string][]device.ContainerRequest{pod.Spec.Containers[0].Name: plan.ownInit}
	}
	return append(plan.apply(pod, spec, h.cfg.Names), notes...), warnings, extra, nil
}
