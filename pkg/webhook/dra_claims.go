package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// In DRA mode every GPU container's request becomes one ResourceClaim, made by
// kube-controller-manager from a ResourceClaimTemplate the webhook creates in the pod's
// namespace: one template per distinct claim spec, named after a hash of the spec, shared by
// every pod that asks the same (docs/dra.md, "Pod API in DRA mode").

const (
	// claimRequestName is the name of the one request of every claim the webhook writes.
	claimRequestName = "gpu"
	// TemplatePrefix prefixes the name of every ResourceClaimTemplate the webhook creates
	// (followed by 16 hex digits of the SHA-256 of the template's spec).
	TemplatePrefix = "hami-go-gpu-"
	// podClaimPrefix prefixes the pod-level claim names the webhook adds (then 0, 1, ...).
	podClaimPrefix = "hami-go-gpu-"
	// LabelClaimTemplate, with value LabelClaimTemplateValue, marks the ResourceClaimTemplates
	// the webhook created (delete them with `kubectl delete resourceclaimtemplates -A -l
	// hami-go.io/claim-template=webhook`; docs/dra.md).
	LabelClaimTemplate      = device.Prefix + "claim-template"
	LabelClaimTemplateValue = "webhook"
)

// claimSpec returns the ResourceClaimSpec of one container's GPU request (cr, parsed by
// device.ParsePodRequest): one request "gpu" for cr.Count devices of the DeviceClass
// gpu.hami-go.io, each consuming the asked memory and cores (capacity requests apply per
// device; within one request the allocator never picks a device twice), with the pod's
// selectors; `firstAvailable` where the request depends on the GPU's kind (variants); a
// matchAttribute on the NUMA node when numa is set and the container uses several GPUs.
// Defaults the API server would add (allocationMode ExactCount) are written out, so a spec
// read back compares equal.
func claimSpec(field string, cr device.ContainerRequest, selectors []string, numa bool, fleet Fleet) (resourceapi.ResourceClaimSpec, error) {
	vs, err := variants(field, cr, fleet)
	if err != nil {
		return resourceapi.ResourceClaimSpec{}, err
	}
	sel := func(v variant) []resourceapi.DeviceSelector {
		var out []resourceapi.DeviceSelector
		for _, e := range append(append([]string(nil), v.selectors...), selectors...) {
			out = append(out, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
		}
		return out
	}
	req := resourceapi.DeviceRequest{Name: claimRequestName}
	if len(vs) == 1 {
		req.Exactly = &resourceapi.ExactDeviceRequest{
			DeviceClassName: draapi.DriverName, Selectors: sel(vs[0]),
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(cr.Count),
			Capacity: vs[0].capacity(cr.CoresPercent),
		}
	} else {
		for i, v := range vs {
			req.FirstAvailable = append(req.FirstAvailable, resourceapi.DeviceSubRequest{
				Name: "v" + strconv.Itoa(i), DeviceClassName: draapi.DriverName, Selectors: sel(v),
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(cr.Count),
				Capacity: v.capacity(cr.CoresPercent),
			})
		}
	}
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}}
	if numa && cr.Count > 1 {
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{numaConstraint()}
	}
	return spec, nil
}

// claimTemplate returns the template of spec in namespace ns: named TemplatePrefix + the first
// 16 hex digits of the SHA-256 of the spec's JSON (encoding/json writes struct fields in order
// and map keys sorted, so equal specs give equal names), labelled LabelClaimTemplate.
func claimTemplate(ns string, spec resourceapi.ResourceClaimSpec) *resourceapi.ResourceClaimTemplate {
	b, _ := json.Marshal(spec) // plain structs, quantities and strings: cannot fail
	sum := sha256.Sum256(b)
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{
			Name: TemplatePrefix + hex.EncodeToString(sum[:8]), Namespace: ns,
			Labels: map[string]string{LabelClaimTemplate: LabelClaimTemplateValue, "app.kubernetes.io/managed-by": "hami-go-webhook"},
		},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec},
	}
}

// claimPlan is what DRA mode adds to a pod: the templates it needs (distinct), the pod-level
// claims, and which claim each GPU container uses (by container name).
type claimPlan struct {
	templates []*resourceapi.ResourceClaimTemplate
	podClaims []corev1.PodResourceClaim
	byName    map[string]string // container name -> pod claim name
	// ownInit are the classic init containers with a claim of their own (no app container or
	// earlier init container asks the same): that claim stays reserved for the pod's whole life.
	ownInit []device.ContainerRequest
}

// planClaims turns a pod's parsed request into claims. Every app container and native sidecar
// gets its own claim (they run at the same time). A classic init container runs alone and
// before the app containers, but a claim stays reserved for the pod's whole life, so a claim of
// its own would be charged on top of the app containers' (unlike Kubernetes' rule for init
// containers, case C03): it shares the claim of an app container, or else of an earlier classic
// init container, whose claim spec is the same (it then sees the same GPUs and limits); with no
// such claim it gets its own, and the pod is charged for both. Errors name field and value.
func planClaims(pod *corev1.Pod, r *device.PodRequest, fleet Fleet) (claimPlan, error) {
	selectors, err := podSelectors(r)
	if err != nil {
		return claimPlan{}, err
	}
	p := claimPlan{byName: map[string]string{}}
	taken := map[string]bool{}
	for _, c := range pod.Spec.ResourceClaims {
		taken[c.Name] = true
	}
	tmplSeen := map[string]bool{}
	next := 0
	newClaim := func(t *resourceapi.ResourceClaimTemplate) string {
		for taken[podClaimPrefix+strconv.Itoa(next)] {
			next++
		}
		name := podClaimPrefix + strconv.Itoa(next)
		taken[name] = true
		p.podClaims = append(p.podClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: &t.Name})
		if !tmplSeen[t.Name] {
			tmplSeen[t.Name] = true
			p.templates = append(p.templates, t)
		}
		return name
	}
	type built struct {
		cr   device.ContainerRequest
		tmpl *resourceapi.ResourceClaimTemplate
	}
	var all []built
	for _, cr := range r.Containers {
		field := "spec.containers[" + cr.Name + "]"
		if cr.Kind != device.KindApp {
			field = "spec.initContainers[" + cr.Name + "]"
		}
		spec, err := claimSpec(field+".resources.limits", cr, selectors, r.NUMABind, fleet)
		if err != nil {
			return claimPlan{}, err
		}
		all = append(all, built{cr, claimTemplate(pod.Namespace, spec)})
	}
	appClaim := map[string]string{}  // template name -> claim of an app container
	initClaim := map[string]string{} // template name -> claim of a classic init container
	for _, b := range all {          // app containers and sidecars first: their own claims
		if b.cr.Kind == device.KindInit {
			continue
		}
		name := newClaim(b.tmpl)
		p.byName[b.cr.Name] = name
		if b.cr.Kind == device.KindApp {
			if _, ok := appClaim[b.tmpl.Name]; !ok {
				appClaim[b.tmpl.Name] = name
			}
		}
	}
	for _, b := range all {
		if b.cr.Kind != device.KindInit {
			continue
		}
		if name, ok := appClaim[b.tmpl.Name]; ok {
			p.byName[b.cr.Name] = name
		} else if name, ok := initClaim[b.tmpl.Name]; ok {
			p.byName[b.cr.Name] = name
		} else {
			name := newClaim(b.tmpl)
			initClaim[b.tmpl.Name] = name
			p.byName[b.cr.Name] = name
			p.ownInit = append(p.ownInit, b.cr)
		}
	}
	return p, nil
}

// apply writes the plan into the pod as decoded JSON: spec.resourceClaims gains the claims,
// each GPU container's resources.claims its claim, and every container loses the GPU
// resources (names) from its limits and requests, so the kubelet never looks for a device
// plugin. It returns one note per claim for the admission message.
func (p claimPlan) apply(pod *corev1.Pod, spec map[string]any, names device.ResourceNames) []string {
	var notes []string
	claims, _ := spec["resourceClaims"].([]any)
	for _, c := range p.podClaims {
		claims = append(claims, map[string]any{"name": c.Name, "resourceClaimTemplateName": *c.ResourceClaimTemplateName})
		notes = append(notes, fmt.Sprintf("spec.resourceClaims[%s]: template %s", c.Name, *c.ResourceClaimTemplateName))
	}
	if len(claims) > 0 {
		spec["resourceClaims"] = claims
	}
	gpu := []string{names.Count, names.Memory, names.MemoryPercent, names.Cores}
	for _, l := range []struct {
		key string
		cs  []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		for i, c := range l.cs {
			ctr := item(spec, l.key, i)
			if ctr == nil {
				continue
			}
			res := child(ctr, "resources", false)
			for _, k := range []string{"limits", "requests"} {
				m := child(res, k, false)
				for _, n := range gpu {
					delete(m, n)
				}
				if m != nil && len(m) == 0 {
					delete(res, k)
				}
			}
			name, ok := p.byName[c.Name]
			if !ok {
				continue
			}
			res = child(ctr, "resources", true)
			rc, _ := res["claims"].([]any)
			res["claims"] = append(rc, map[string]any{"name": name})
			notes = append(notes, fmt.Sprintf("spec.%s[%s]: claim %s", l.key, c.Name, name))
		}
	}
	return notes
}
