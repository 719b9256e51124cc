package ray

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hami-go/hami-go/pkg/device"
)

// AnnoManaged is the RayCluster annotation in which the webhook lists, per group, the keys it
// wrote: a JSON object {"head": [...], "worker/<groupName>": [...]} whose entries are
// "rayStartParams.num-gpus", "rayStartParams.resources[<name>]" or "resources[<name>]". On
// every create and update the webhook first removes what it listed, then recomputes, so its
// own values are never mistaken for a user's (case C31).
const AnnoManaged = device.Prefix + "ray-managed"

// rayGPUKey is the key the webhook writes in a group's top-level `resources` field for the GPU
// count; KubeRay v1.5 maps every key ending in "gpu" (case-insensitive) to --num-gpus.
const rayGPUKey = "GPU"

// migKey is KubeRay v1.5's MIG resource pattern (utils.IsGPUResourceKey).
var migKey = regexp.MustCompile(`nvidia\.com/mig-\d+g\.\d+gb$`)

// isGPUKey is KubeRay v1.5's rule for a group `resources` key that becomes --num-gpus
// (controllers/ray/common/pod.go updateRayStartParamsResources).
func isGPUKey(k string) bool {
	k = strings.ToLower(k)
	return strings.HasSuffix(k, "gpu") || migKey.MatchString(k)
}

// ClusterResult is what MutateCluster did.
type ClusterResult struct {
	// Warnings explain values left alone (a user's num-gpus that differs from the template's
	// GPU count, an unreadable resources JSON or managed annotation).
	Warnings []string
}

// MutateCluster rewrites a RayCluster (ray.io/v1, as decoded JSON) in place so the Ray
// autoscaler, which reads the RayCluster and not the pods, computes the same GPU totals as the
// pods' rewritten `ray start` lines. For spec.headGroupSpec and every spec.workerGroupSpecs[*]:
//
//   - the group's Ray container (template.spec.containers[0]) gets its GPU count by c.GPUCount,
//     a missing count resource defaulting to 1 where memory or cores are given (as the pod
//     webhook defaults it); 0 when it asks for none (case C33);
//   - num-gpus (an integer string) and, when the container asks for GPU memory in MiB, the
//     custom resource c.MemoryResource = MiB × count are written into rayStartParams
//     (`num-gpus`, and a key of the JSON in `resources`, KubeRay's '{"k":v}' form) — or, where
//     the group uses KubeRay v1.5's top-level `resources` field, into that field (`GPU` and
//     c.MemoryResource), since v1.5 rejects resource keys in both places;
//   - a value the user set (rayStartParams num-gpus, a GPU key of `resources`, an existing
//     memory key) is never overwritten (C31);
//   - labels: the GPU model is known only at Allocate, so nothing is written to a group's
//     `labels` (and never into rayStartParams, which v1.5 rejects); the pod's rewritten
//     `ray start` line carries the label.
//
// What it wrote is listed in the AnnoManaged annotation. names gives the slice resources; a
// template whose GPU request is invalid is an error naming the group and field.
func (c Config) MutateCluster(obj map[string]any, names device.ResourceNames) (ClusterResult, error) {
	var res ClusterResult
	meta, _ := obj["metadata"].(map[string]any)
	prev := map[string][]string{}
	if meta != nil {
		if ann, _ := meta["annotations"].(map[string]any); ann != nil {
			if s, ok := ann[AnnoManaged].(string); ok && s != "" {
				if err := json.Unmarshal([]byte(s), &prev); err != nil {
					res.Warnings = append(res.Warnings, fmt.Sprintf("metadata.annotations[%s]: %q is not readable (%v); its values are treated as the user's", AnnoManaged, s, err))
					prev = map[string][]string{}
				}
			}
		}
	}
	spec, _ := obj["spec"].(map[string]any)
	if spec == nil {
		return res, nil
	}
	managed := map[string][]string{}
	type group struct {
		key, path string
		m         map[string]any
	}
	var groups []group
	if h, ok := spec["headGroupSpec"].(map[string]any); ok {
		groups = append(groups, group{"head", "spec.headGroupSpec", h})
	}
	if ws, ok := spec["workerGroupSpecs"].([]any); ok {
		for i, w := range ws {
			wm, ok := w.(map[string]any)
			if !ok {
				continue
			}
			name, _ := wm["groupName"].(string)
			path := fmt.Sprintf("spec.workerGroupSpecs[%d]", i)
			if name != "" {
				path = fmt.Sprintf("spec.workerGroupSpecs[%s]", name)
			}
			groups = append(groups, group{"worker/" + name, path, wm})
		}
	}
	for _, g := range groups {
		keys, warns, err := c.mutateGroup(g.path, g.m, prev[g.key], names)
		if err != nil {
			return res, err
		}
		res.Warnings = append(res.Warnings, warns...)
		if len(keys) > 0 {
			managed[g.key] = keys
		}
	}
	if len(managed) == 0 && len(prev) == 0 {
		return res, nil
	}
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if len(managed) == 0 {
		delete(ann, AnnoManaged)
		return res, nil
	}
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	b, _ := json.Marshal(managed) // map keys come out sorted
	ann[AnnoManaged] = string(b)
	return res, nil
}

// mutateGroup handles one head or worker group; prev lists the keys the webhook wrote before.
func (c Config) mutateGroup(path string, g map[string]any, prev []string, names device.ResourceNames) ([]string, []string, error) {
	n, memPerGPU, ok, err := c.groupGPUs(path, g, names)
	if err != nil || !ok {
		return nil, nil, err
	}

	// Forget what the webhook wrote before, so it is recomputed rather than taken for the user's.
	rsp, _ := g["rayStartParams"].(map[string]any)
	top, _ := g["resources"].(map[string]any)
	useTop := len(top) > 0
	forgetManaged(prev, rsp, top)
	for _, k := range []string{"num-cpus", "num-gpus", "memory", "resources"} {
		if s, _ := rsp[k].(string); s != "" {
			useTop = false // KubeRay v1.5 rejects both places; never add a second one
		}
	}

	var keys, warns []string
	if useTop {
		keys, warns = c.writeTopResources(path, g, top, n, memPerGPU)
	} else {
		keys, warns = c.writeStartParams(path, g, rsp, n, memPerGPU)
	}
	sort.Strings(keys)
	return keys, warns, nil
}

// groupGPUs reads a group's pod template and returns its Ray container's GPU count and GPU
// memory per GPU in MiB; ok is false where the group has no template spec or no container.
func (c Config) groupGPUs(path string, g map[string]any, names device.ResourceNames) (n int, memPerGPU int64, ok bool, err error) {
	tmpl, _ := g["template"].(map[string]any)
	podSpec, _ := tmpl["spec"].(map[string]any)
	if podSpec == nil {
		return 0, 0, false, nil
	}
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(podSpec, &spec); err != nil {
		return 0, 0, false, fmt.Errorf("%s.template.spec: %v", path, err)
	}
	if len(spec.Containers) == 0 {
		return 0, 0, false, nil
	}
	req, err := device.ParsePodRequest(&corev1.Pod{Spec: spec}, names)
	if err != nil {
		return 0, 0, false, fmt.Errorf("%s.template.%v", path, err)
	}
	rc := &spec.Containers[ContainerIndex]
	countDefault := 0
	for _, cr := range req.Containers {
		if cr.Kind == device.KindApp && cr.Name == rc.Name {
			countDefault, memPerGPU = cr.Count, cr.MemoryMiB
		}
	}
	n, err = c.GPUCount(fmt.Sprintf("%s.template.spec.containers[%s]", path, rc.Name), rc.Resources, names.Count, countDefault)
	if err != nil {
		return 0, 0, false, err
	}
	return n, memPerGPU, true, nil
}

// forgetManaged removes from a group's rayStartParams (rsp) and top-level resources (top) the
// keys the webhook listed as written before (prev).
func forgetManaged(prev []string, rsp, top map[string]any) {
	for _, k := range prev {
		switch {
		case k == "rayStartParams.num-gpus":
			delete(rsp, "num-gpus")
		case strings.HasPrefix(k, "rayStartParams.resources[") && strings.HasSuffix(k, "]"):
			name := k[len("rayStartParams.resources[") : len(k)-1]
			if s, ok := rsp["resources"].(string); ok {
				m, err := parseResourcesJSON(s)
				if err == nil {
					delete(m, name)
					if len(m) == 0 {
						delete(rsp, "resources")
					} else {
						rsp["resources"] = formatResourcesJSON(m)
					}
				}
			}
		case strings.HasPrefix(k, "resources[") && strings.HasSuffix(k, "]"):
			delete(top, k[len("resources["):len(k)-1])
		}
	}
}

// writeTopResources writes the GPU count n and the GPU memory (memPerGPU × n MiB) into the
// group's KubeRay v1.5 top-level `resources` field, leaving a user's values alone; it returns
// the keys written and warnings about the user's values.
func (c Config) writeTopResources(path string, g, top map[string]any, n int, memPerGPU int64) (keys, warns []string) {
	if top == nil {
		top = map[string]any{}
	}
	userGPU := ""
	for k, v := range top {
		if isGPUKey(k) {
			userGPU = fmt.Sprint(v)
		}
	}
	if userGPU != "" {
		warns = append(warns, userValueWarning(path+".resources", userGPU, n)...)
	} else {
		top[rayGPUKey] = strconv.Itoa(n)
		keys = append(keys, "resources["+rayGPUKey+"]")
	}
	if mem := memPerGPU * int64(n); mem > 0 && c.MemoryResource != "" {
		if _, has := top[c.MemoryResource]; !has {
			top[c.MemoryResource] = strconv.FormatInt(mem, 10)
			keys = append(keys, "resources["+c.MemoryResource+"]")
		}
	}
	g["resources"] = top
	return keys, warns
}

// writeStartParams writes the GPU count n as num-gpus and the GPU memory (memPerGPU × n MiB)
// into the `resources` JSON of the group's rayStartParams (rsp), leaving a user's values
// alone; it returns the keys written and warnings about the user's values.
func (c Config) writeStartParams(path string, g, rsp map[string]any, n int, memPerGPU int64) (keys, warns []string) {
	if rsp == nil {
		rsp = map[string]any{}
	}
	if v, ok := rsp["num-gpus"]; ok {
		warns = append(warns, userValueWarning(path+".rayStartParams[num-gpus]", fmt.Sprint(v), n)...)
	} else {
		rsp["num-gpus"] = strconv.Itoa(n)
		keys = append(keys, "rayStartParams.num-gpus")
	}
	if mem := memPerGPU * int64(n); mem > 0 && c.MemoryResource != "" {
		m := map[string]json.RawMessage{}
		if s, ok := rsp["resources"].(string); ok && strings.TrimSpace(s) != "" {
			var err error
			if m, err = parseResourcesJSON(s); err != nil {
				warns = append(warns, fmt.Sprintf("%s.rayStartParams[resources]: %q is not a JSON object (%v); %s not added", path, s, err, c.MemoryResource))
				m = nil
			}
		}
		if _, has := m[c.MemoryResource]; m != nil && !has {
			m[c.MemoryResource] = json.RawMessage(strconv.FormatInt(mem, 10))
			rsp["resources"] = formatResourcesJSON(m)
			keys = append(keys, "rayStartParams.resources["+c.MemoryResource+"]")
		}
	}
	g["rayStartParams"] = rsp
	return keys, warns
}

// userValueWarning explains a user's GPU value that Ray would reject or that differs from n.
func userValueWarning(field, v string, n int) []string {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	switch {
	case err != nil || f != float64(int64(f)) || f < 0:
		return []string{fmt.Sprintf("%s: %q is not a whole number of GPUs; Ray rejects fractional --num-gpus (kept: a value the user set is never overwritten)", field, v)}
	case int(f) != n:
		return []string{fmt.Sprintf("%s: %s differs from the Ray container's %d GPU(s) (kept: a value the user set is never overwritten)", field, v, n)}
	}
	return nil
}

// parseResourcesJSON reads rayStartParams["resources"]: a JSON object, which KubeRay pastes
// into the shell line verbatim, so it is usually quoted for the shell: '{"a":1}' or
// "{\"a\": 1}" (KubeRay's documented form). Bare JSON is accepted too.
func parseResourcesJSON(s string) (map[string]json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	err := json.Unmarshal([]byte(strings.Trim(s, "'\"` ")), &m)
	if err == nil {
		return m, nil
	}
	if ws, werr := splitWords(strings.TrimSpace(s)); werr == nil && len(ws) == 1 {
		m = map[string]json.RawMessage{}
		if json.Unmarshal([]byte(ws[0].value), &m) == nil {
			return m, nil
		}
	}
	return nil, err
}

// formatResourcesJSON writes m in KubeRay's form: '{"k":v,...}' (keys sorted).
func formatResourcesJSON(m map[string]json.RawMessage) string {
	b, _ := json.Marshal(m)
	return "'" + string(b) + "'"
}
