package deviceplugin

import "testing"

// The record keeps the latest response per device ID: an answer that reuses one ID of an
// earlier set supersedes that whole set, and a lookup must name exactly the answered set.
func TestIssuedSupersedes(t *testing.T) {
	var s issued
	s.record([]string{"GPU-A::1", "GPU-B::1"}, map[string]string{"v": "1"})
	if env, ok := s.lookup([]string{"GPU-B::1", "GPU-A::1"}); !ok || env["v"] != "1" {
		t.Fatalf("lookup in another order: %v, %v; want v=1", env, ok)
	}
	if _, ok := s.lookup([]string{"GPU-A::1"}); ok {
		t.Error("lookup of a subset found an entry; want none")
	}
	s.record([]string{"GPU-B::1"}, map[string]string{"v": "2"})
	if _, ok := s.lookup([]string{"GPU-A::1", "GPU-B::1"}); ok {
		t.Error("the superseded set is still found")
	}
	if env, ok := s.lookup([]string{"GPU-B::1"}); !ok || env["v"] != "2" {
		t.Errorf("lookup of the new answer: %v, %v; want v=2", env, ok)
	}
	if len(s.byID) != 1 {
		t.Errorf("%d IDs recorded, want 1 (GPU-A::1 left with its superseded set)", len(s.byID))
	}
	if _, ok := s.lookup(nil); ok {
		t.Error("lookup of no IDs found an entry")
	}
}
