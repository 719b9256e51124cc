package deviceplugin

import (
	"slices"
	"strings"
	"sync"
)

// issued remembers the env of every Allocate response by the kubelet device IDs it answered:
// the kubelet hands a container the response of the call made for that container's IDs,
// whichever pod the ledger matched the call to, so after a swap of interchangeable pods
// (ledger.Reconcile) this, not the claim's rebuild, is what the container got (the identity
// paths in it, such as the HAMi-core cache file, name the pod matched at Allocate time). A
// device ID is held by one container at a time, so an answer supersedes every earlier one that
// shares an ID with it: the record holds at most one entry per slice ID.
type issued struct {
	mu   sync.Mutex
	byID map[string]*issuedEnv // slice ID -> the latest response that answered it
}

type issuedEnv struct {
	ids []string // sorted
	env map[string]string
}

// record stores env as the response to ids (any order).
func (s *issued) record(ids []string, env map[string]string) {
	e := &issuedEnv{ids: slices.Sorted(slices.Values(ids)), env: env}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]*issuedEnv{}
	}
	for _, id := range ids {
		if old := s.byID[id]; old != nil {
			for _, o := range old.ids {
				if s.byID[o] == old {
					delete(s.byID, o)
				}
			}
		}
	}
	for _, id := range ids {
		s.byID[id] = e
	}
}

// lookup returns the env of the latest response to exactly ids (any order); false when none
// (the plugin restarted since, or the kubelet holds another set).
func (s *issued) lookup(ids []string) (map[string]string, bool) {
	if len(ids) == 0 {
		return nil, false
	}
	want := slices.Sorted(slices.Values(ids))
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byID[want[0]]
	if e == nil || strings.Join(e.ids, ",") != strings.Join(want, ",") {
		return nil, false
	}
	return e.env, true
}
