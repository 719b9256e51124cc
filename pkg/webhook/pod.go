package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/ray"
)

// PodHandler is the admission.Handler of /mutate-pods (CREATE, and UPDATE of the
// pods/ephemeralcontainers subresource). Every pod, GPU or not, is refused when a container
// (init, app or ephemeral) sets a protected variable in its env (device.IsProtectedEnv, case
// C37), and when an annotation's key is a slice resource name (case C39; Config.
// ResourceAnnotations may make that a warning). For a pod that uses slices in any container
// (init, sidecar or app; case C26) it
//   - validates every quantity, percentage, policy and annotation (device.ParsePodRequest and
//     validateAnnotations; cases C07, C08) and denies with the error, which names field and value;
//   - applies the privileged rule (case C25, Config.Privileged);
//   - denies a preset spec.nodeName, and sets spec.schedulerName to Config.SchedulerName where
//     it is default-scheduler (a third-party scheduler is left alone; case C27);
//   - adds the count resource = 1 to containers that give only memory or cores.
//
// For a KubeRay pod (label ray.io/node-type), GPU or not, it rewrites the Ray container's
// `ray start` line (pkg/ray; cases C31-C33). A pod that uses no slices and is not a Ray pod, a
// pod labelled hami-go.io/ignore=true, and a pod in Config.Namespace get no patch at all.
//
// In DRA mode (Config.Mode) a GPU pod instead gets ResourceClaims for the DeviceClass
// gpu.hami-go.io in place of its GPU limits (dra_claims.go; docs/dra.md, "Pod API in DRA
// mode"); its scheduler is left alone (stock kube-scheduler allocates claims).
type PodHandler struct {
	cfg    Config
	m      *Metrics
	store  TemplateStore // DRA mode only
	fleet  Fleet         // DRA mode only
	quotas Quotas        // nil: no namespace caps GPU memory
}

// NewPodHandler returns the pod handler; cfg must be valid (Config.Validate), m may be nil.
// In DRA mode use NewDRAPodHandler.
func NewPodHandler(cfg Config, m *Metrics) *PodHandler { return &PodHandler{cfg: cfg, m: m} }

// NewDRAPodHandler returns the pod handler of DRA mode (cfg.Mode ModeDRA): store creates the
// claim templates, fleet lists the published GPU kinds (for percentages and exclusive GPUs).
func NewDRAPodHandler(cfg Config, m *Metrics, store TemplateStore, fleet Fleet) *PodHandler {
	return &PodHandler{cfg: cfg, m: m, store: store, fleet: fleet}
}

// Handle implements admission.Handler.
func (h *PodHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	return review(h.m, "pods", req, func() admission.Response { return h.handle(ctx, req) })
}

func (h *PodHandler) handle(ctx context.Context, req admission.Request) admission.Response {
	if isEphemeralUpdate(req) {
		if h.cfg.Namespace != "" && req.Namespace == h.cfg.Namespace {
			return admission.Allowed("hami-go's own namespace")
		}
		return h.ephemeralUpdate(req)
	}
	if req.Operation != admissionv1.Create {
		return admission.Allowed("hami-go mutates pods only on create")
	}
	if h.cfg.Namespace != "" && req.Namespace == h.cfg.Namespace {
		return admission.Allowed("hami-go's own namespace")
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return badRequest("pod", err)
	}
	if pod.Labels[device.LabelOptOut] == "true" {
		return admission.Allowed("opted out (" + device.LabelOptOut + "=true)")
	}
	// case C37: GPU pod or not (NVIDIA_VISIBLE_DEVICES exposes GPUs through NVIDIA's runtime).
	if err := h.protectedEnvError(&pod.Spec); err != nil {
		return admission.Denied(err.Error())
	}
	if err := borrowedClaimError(&pod.Spec, h.cfg.Names); err != nil {
		return admission.Denied(err.Error())
	}
	// case C39: slice resources written as annotations are refused (or warned about).
	misplaced := misplacedResourceAnnotations(pod.Annotations, h.cfg.Names)
	if len(misplaced) > 0 && h.cfg.ResourceAnnotations == AnnotationDeny {
		return admission.Denied(strings.Join(misplaced, "; "))
	}
	resp := h.create(ctx, req, &pod)
	return resp.WithWarnings(misplaced...)
}

// create reviews a new pod that is not opted out and sets no protected env.
func (h *PodHandler) create(ctx context.Context, req admission.Request, pod *corev1.Pod) admission.Response {
	request, err := device.ParsePodRequest(pod, h.cfg.Names)
	if err != nil {
		return admission.Denied(err.Error())
	}
	// What the API server's own validation of extended resources refuses and the parse above
	// (which reads limits) does not: a request without its limit, or unequal to it. In both
	// modes, with the API server's words: in DRA mode the resources move into a claim before the
	// API server would see them.
	if errs := device.ValidateGPUResources(&pod.Spec, h.cfg.Names); len(errs) > 0 {
		return admission.Denied(errs.ToAggregate().Error())
	}
	if err := validateAnnotations(pod.Annotations); err != nil {
		return admission.Denied(err.Error())
	}
	isRay := pod.Labels[ray.LabelNodeType] != ""
	preset := hasSynthetic(pod)
	if !request.UsesGPU() && !isRay && !preset {
		return admission.Allowed("no GPU slices")
	}
	var doc map[string]any
	if err := json.Unmarshal(req.Object.Raw, &doc); err != nil {
		return badRequest("pod", err)
	}
	spec := child(doc, "spec", true)
	ns := pod.Namespace
	if ns == "" {
		ns = req.Namespace
	}
	var notes, warnings []string
	var syntheticExtra map[string][]device.ContainerRequest
	if request.UsesGPU() {
		n, w, extra, done := h.placeGPUPod(ctx, req, pod, &request, spec)
		if done != nil {
			return *done
		}
		notes, warnings, syntheticExtra = append(notes, n...), append(warnings, w...), extra
	}
	// device.ResourceGPUMemory and device.ResourceGPUCores: the webhook is their only writer
	// (removed from any pod that sets them, written into each GPU container from its request).
	var gpuReq *device.PodRequest
	if request.UsesGPU() {
		gpuReq = &request
	}
	n, err := h.syntheticResources(pod, ns, gpuReq, spec, syntheticExtra)
	if err != nil {
		return admission.Denied(err.Error())
	}
	notes = append(notes, n...)
	n, w, err := h.rayStep(pod, spec, request, isRay)
	if err != nil {
		return admission.Denied(err.Error())
	}
	notes, warnings = append(notes, n...), append(warnings, w...)
	ops, err := diffPatch(req.Object.Raw, doc)
	if err != nil {
		return admission.Denied("hami-go webhook: " + err.Error())
	}
	msg := "hami-go: " + strings.Join(notes, "; ")
	if len(ops) == 0 {
		return admission.Allowed(msg).WithWarnings(warnings...)
	}
	return admission.Patched(msg, ops...).WithWarnings(warnings...)
}

// placeGPUPod places a new pod that uses GPU slices, by the webhook's mode: in DRA mode its
// slices move into claims (draClaims); otherwise it is routed to the extender, with the GPU
// memory node affinity when configured. It returns the notes, warnings and the extra synthetic
// requests of DRA mode, or done, the review's response, when the pod is refused or left
// untouched (privileged containers, a preset spec.nodeName, a failed claim).
func (h *PodHandler) placeGPUPod(ctx context.Context, req admission.Request, pod *corev1.Pod, request *device.PodRequest, spec map[string]any) (notes, warnings []string, syntheticExtra map[string][]device.ContainerRequest, done *admission.Response) {
	if f := privilegedContainer(&pod.Spec); f != "" {
		if h.cfg.Privileged == PrivilegedDeny {
			return nil, nil, nil, respond(admission.Denied(fmt.Sprintf("%s: true; a privileged container sees every GPU of the node, so hami-go refuses GPU pods with privileged containers (webhook --privileged=deny)", f)))
		}
		msg := fmt.Sprintf("%s: true; hami-go leaves this GPU pod untouched (webhook --privileged=ignore): it is not scheduled by %s and gets no slice from hami-go's device plugin", f, h.cfg.SchedulerName)
		return nil, nil, nil, respond(admission.Allowed(msg).WithWarnings(msg))
	}
	if h.cfg.Mode == ModeDRA {
		n, w, extra, err := h.draClaims(ctx, req, pod, request, spec)
		if err != nil {
			return nil, nil, nil, respond(admission.Denied(err.Error()))
		}
		notes, warnings, syntheticExtra = append(notes, n...), append(warnings, w...), extra
	} else {
		if pod.Spec.NodeName != "" {
			// No opt-out is offered here: an opted-out pod that still asks for slices is refused
			// by the device plugin at Allocate (it was not placed by the extender).
			return nil, nil, nil, respond(admission.Denied(fmt.Sprintf("spec.nodeName: preset to %q; a pod that uses GPU slices must be placed by %s, which picks its GPUs (remove spec.nodeName and pin the node with a nodeSelector, e.g. kubernetes.io/hostname: %s)", pod.Spec.NodeName, h.cfg.SchedulerName, pod.Spec.NodeName)))
		}
		n, w := h.routeToExtender(pod, spec)
		notes, warnings = append(notes, n...), append(warnings, w...)
		if h.cfg.GPUMemoryNodeAffinity {
			if note := gpuMemoryAffinity(spec, request); note != "" {
				notes = append(notes, note)
			}
		}
	}
	return notes, warnings, syntheticExtra, nil
}

// respond is r as placeGPUPod's done: the review's final response.
func respond(r admission.Response) *admission.Response { return &r }

// rayStep rewrites the `ray start` line of a Ray pod (isRay) by rayStart, except in DRA mode
// for a pod that carries its own resourceClaims: they give it GPUs the limits do not show, so
// its `ray start` is the user's, and a note says so.
func (h *PodHandler) rayStep(pod *corev1.Pod, spec map[string]any, request device.PodRequest, isRay bool) (notes, warnings []string, err error) {
	if isRay && h.cfg.Mode == ModeDRA && len(pod.Spec.ResourceClaims) > 0 {
		// The pod's own claims give it GPUs the limits do not show: its `ray start` is the user's.
		return []string{"Ray start line left as written (the pod carries its own resourceClaims)"}, nil, nil
	}
	if isRay {
		return h.rayStart(pod, spec, request)
	}
	return nil, nil, nil
}

// routeToExtender sets spec.schedulerName (device-plugin mode, case C27) and the count
// default (defaultCounts).
func (h *PodHandler) routeToExtender(pod *corev1.Pod, spec map[string]any) (notes, warnings []string) {
	switch pod.Spec.SchedulerName {
	case "", DefaultScheduler:
		spec["schedulerName"] = h.cfg.SchedulerName
		notes = append(notes, "spec.schedulerName="+h.cfg.SchedulerName)
	case h.cfg.SchedulerName:
	default: // case C27: a third-party scheduler is left alone, but the user is told the cost
		warnings = append(warnings, fmt.Sprintf("spec.schedulerName: %q is kept; hami-go's device plugin gives GPU slices only to pods placed by %s, so unless %q delegates to hami-go's extender this pod's GPU allocation will be refused", pod.Spec.SchedulerName, h.cfg.SchedulerName, pod.Spec.SchedulerName))
	}
	return append(notes, h.defaultCounts(pod, spec)...), warnings
}

// defaultCounts adds the count resource (1) where a container gives only memory or cores: to
// its limits, and to its requests when they hold a slice resource (extended resources must
// have requests equal to limits).
func (h *PodHandler) defaultCounts(pod *corev1.Pod, spec map[string]any) []string {
	n := h.cfg.Names
	slice := []corev1.ResourceName{corev1.ResourceName(n.Memory), corev1.ResourceName(n.MemoryPercent), corev1.ResourceName(n.Cores)}
	var notes []string
	for _, l := range []struct {
		key string
		cs  []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i, c := range l.cs {
			count := corev1.ResourceName(n.Count)
			if _, ok := c.Resources.Limits[count]; ok {
				continue
			}
			if _, ok := c.Resources.Requests[count]; ok {
				continue
			}
			inLimits, inRequests := hasAny(c.Resources.Limits, slice), hasAny(c.Resources.Requests, slice)
			if !inLimits && !inRequests {
				continue
			}
			res := child(item(spec, l.key, i), "resources", true)
			child(res, "limits", true)[n.Count] = "1"
			if inRequests {
				child(res, "requests", true)[n.Count] = "1"
			}
			notes = append(notes, fmt.Sprintf("spec.%s[%s]: %s=1 (only memory or cores given)", l.key, c.Name, n.Count))
		}
	}
	return notes
}

func hasAny(l corev1.ResourceList, names []corev1.ResourceName) bool {
	for _, n := range names {
		if q, ok := l[n]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

// rayStart rewrites the `ray start` line of the Ray container (the first app container, by
// KubeRay's convention, or else the first one that runs `ray start`), in its command or args
// and in KUBERAY_GEN_RAY_START_CMD, with --num-gpus = its GPU count (pkg/ray).
func (h *PodHandler) rayStart(pod *corev1.Pod, spec map[string]any, request device.PodRequest) (notes, warnings []string, err error) {
	idx := -1
	for i, c := range pod.Spec.Containers {
		if runsRayStart(c.Command) || runsRayStart(c.Args) {
			idx = i
			break
		}
	}
	if idx < 0 {
		if len(pod.Spec.Containers) == 0 {
			return nil, nil, nil
		}
		c := pod.Spec.Containers[ray.ContainerIndex]
		return nil, []string{fmt.Sprintf("spec.containers[%s]: no `ray start` in its command or args; --num-gpus not set", c.Name)}, nil
	}
	c := &pod.Spec.Containers[idx]
	field := fmt.Sprintf("spec.containers[%s]", c.Name)
	dflt := 0
	for _, cr := range request.Containers {
		if cr.Kind == device.KindApp && cr.Name == c.Name {
			dflt = cr.Count
		}
	}
	n, err := h.cfg.Ray.GPUCount(field, c.Resources, h.cfg.Names.Count, dflt)
	if err != nil {
		return nil, nil, err
	}
	ctr := item(spec, "containers", idx)
	done := false
	for _, key := range []string{"command", "args"} {
		list, _ := ctr[key].([]any)
		for j, v := range list {
			s, ok := v.(string)
			if !ok || done {
				continue
			}
			r, err := h.cfg.Ray.RewriteStartLine(s, n)
			if err != nil {
				return nil, nil, fmt.Errorf("%s.%s[%d]: %v", field, key, j, err)
			}
			if !r.Found {
				continue
			}
			done = true
			for _, w := range r.Warnings {
				warnings = append(warnings, field+": "+w)
			}
			if r.Changed {
				list[j] = r.Line
				notes = append(notes, field+": ray start --num-gpus="+numGPUsNote(r, n))
			}
		}
	}
	for j, e := range c.Env {
		if e.Name != ray.EnvGeneratedStartCmd || e.ValueFrom != nil {
			continue
		}
		r, err := h.cfg.Ray.RewriteStartLine(e.Value, n)
		if err == nil && r.Changed {
			if env := item(ctr, "env", j); env != nil {
				env["value"] = r.Line
			}
		}
	}
	return notes, warnings, nil
}

func numGPUsNote(r ray.StartLine, n int) string {
	if r.UserNumGPUs != "" {
		return r.UserNumGPUs + " (the user's)"
	}
	return strconv.Itoa(n)
}

func runsRayStart(list []string) bool {
	for _, s := range list {
		if strings.Contains(s, "ray start") { // also matches /path/to/ray start
			return true
		}
	}
	return false
}
