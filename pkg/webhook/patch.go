package webhook

import (
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
)

// The handlers mutate the request's object as decoded JSON (map[string]any), so fields this
// webhook does not know survive untouched, and diff it against the raw request: the patch holds
// only what changed (gomodules.xyz/jsonpatch diffs arrays element by element).

// child returns m[key] as an object, creating it when create is set.
func child(m map[string]any, key string, create bool) map[string]any {
	c, ok := m[key].(map[string]any)
	if !ok && create {
		c = map[string]any{}
		m[key] = c
	}
	return c
}

// item returns element i of the array m[key] as an object (nil when absent).
func item(m map[string]any, key string, i int) map[string]any {
	a, _ := m[key].([]any)
	if i < 0 || i >= len(a) {
		return nil
	}
	o, _ := a[i].(map[string]any)
	return o
}

// diffPatch returns the JSON patch from raw to doc.
func diffPatch(raw []byte, doc map[string]any) ([]jsonpatch.JsonPatchOperation, error) {
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the mutated object: %w", err)
	}
	return jsonpatch.CreatePatch(raw, b)
}
