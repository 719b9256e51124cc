package webhook

// hideClaimGroups detaches, from a RayCluster decoded as JSON, the pod template of every head
// or worker group whose template already carries spec.resourceClaims, and returns the function
// that puts them back. In DRA mode such a group is left as written: its GPUs come from its own
// claims, not from limits, so the Ray figures derived from limits (ray.Config.MutateCluster)
// would be wrong (0 GPUs).
func hideClaimGroups(obj map[string]any) (restore func()) {
	spec, _ := obj["spec"].(map[string]any)
	var groups []map[string]any
	if h, ok := spec["headGroupSpec"].(map[string]any); ok {
		groups = append(groups, h)
	}
	ws, _ := spec["workerGroupSpecs"].([]any)
	for _, w := range ws {
		if wm, ok := w.(map[string]any); ok {
			groups = append(groups, wm)
		}
	}
	type hidden struct {
		g    map[string]any
		tmpl any
	}
	var hid []hidden
	for _, g := range groups {
		tmpl, _ := g["template"].(map[string]any)
		ps, _ := tmpl["spec"].(map[string]any)
		if rc, _ := ps["resourceClaims"].([]any); len(rc) > 0 {
			hid = append(hid, hidden{g, g["template"]})
			delete(g, "template")
		}
	}
	return func() {
		for _, h := range hid {
			h.g["template"] = h.tmpl
		}
	}
}
