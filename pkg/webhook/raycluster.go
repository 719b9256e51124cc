package webhook

import (
	"context"
	"encoding/json"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/hami-go/hami-go/pkg/device"
)

// RayClusterHandler is the admission.Handler of /mutate-rayclusters (ray.io/v1 RayCluster,
// CREATE and UPDATE): it writes each group's GPU count and GPU memory where the Ray autoscaler
// reads them (ray.Config.MutateCluster), and denies a group template whose GPU request is
// invalid, naming the group and field. A RayCluster labelled hami-go.io/ignore=true or in
// Config.Namespace gets no patch. In DRA mode a group whose pod template already carries
// spec.resourceClaims is left as written (hideClaimGroups).
type RayClusterHandler struct {
	cfg Config
	m   *Metrics
}

// NewRayClusterHandler returns the RayCluster handler; cfg must be valid, m may be nil.
func NewRayClusterHandler(cfg Config, m *Metrics) *RayClusterHandler {
	return &RayClusterHandler{cfg: cfg, m: m}
}

// Handle implements admission.Handler.
func (h *RayClusterHandler) Handle(_ context.Context, req admission.Request) admission.Response {
	return review(h.m, "rayclusters", req, func() admission.Response { return h.handle(req) })
}

func (h *RayClusterHandler) handle(req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("hami-go mutates RayClusters only on create and update")
	}
	if h.cfg.Namespace != "" && req.Namespace == h.cfg.Namespace {
		return admission.Allowed("hami-go's own namespace")
	}
	var obj map[string]any
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		return badRequest("RayCluster", err)
	}
	if meta, _ := obj["metadata"].(map[string]any); meta != nil {
		if labels, _ := meta["labels"].(map[string]any); labels[device.LabelOptOut] == "true" {
			return admission.Allowed("opted out (" + device.LabelOptOut + "=true)")
		}
	}
	restore := func() {}
	if h.cfg.Mode == ModeDRA {
		restore = hideClaimGroups(obj)
	}
	res, err := h.cfg.Ray.MutateCluster(obj, h.cfg.Names)
	restore()
	if err != nil {
		return admission.Denied(err.Error())
	}
	ops, err := diffPatch(req.Object.Raw, obj)
	if err != nil {
		return admission.Denied("hami-go webhook: " + err.Error())
	}
	if len(ops) == 0 {
		return admission.Allowed("hami-go: Ray GPU figures up to date").WithWarnings(res.Warnings...)
	}
	return admission.Patched("hami-go: Ray GPU figures written", ops...).WithWarnings(res.Warnings...)
}
