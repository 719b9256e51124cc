package device

import "testing"

func TestRequestedMemoryMiB(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    ContainerRequest
		mib  int64
		ok   bool
	}{
		{"2 GPUs x 30000 MiB", ContainerRequest{Count: 2, MemoryMiB: 30000}, 60000, true},
		{"1 GPU x 30000 MiB", ContainerRequest{Count: 1, MemoryMiB: 30000}, 30000, true},
		{"percentage: unknown before placement", ContainerRequest{Count: 1, MemoryPercent: 50}, 0, false},
		{"no memory given (100%): unknown", ContainerRequest{Count: 1}, 0, false},
		{"no GPU", ContainerRequest{}, 0, true},
	} {
		mib, ok := RequestedMemoryMiB(tc.c)
		if mib != tc.mib || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, mib, ok, tc.mib, tc.ok)
		}
	}
}

// The pod figure follows Kubernetes' effective-request rule (component-helpers PodRequests):
// max(each classic init + the sidecars declared before it, all sidecars + all app containers).
func TestEffectiveMemoryMiB(t *testing.T) {
	c := func(name string, kind ContainerKind, n int, mib int64) ContainerRequest {
		return ContainerRequest{Name: name, Kind: kind, Count: n, MemoryMiB: mib}
	}
	pct := ContainerRequest{Name: "p", Kind: KindApp, Count: 1, MemoryPercent: 50}
	for _, tc := range []struct {
		name string
		cs   []ContainerRequest
		want int64
	}{
		{"one app 2 x 30000", []ContainerRequest{c("a", KindApp, 2, 30000)}, 60000},
		{"two apps add up", []ContainerRequest{c("a", KindApp, 1, 30000), c("b", KindApp, 2, 1000)}, 32000},
		{"init larger than app: init counts", []ContainerRequest{c("i", KindInit, 1, 50000), c("a", KindApp, 1, 30000)}, 50000},
		{"inits run one by one: the largest", []ContainerRequest{c("i1", KindInit, 1, 10240), c("i2", KindInit, 1, 10240), c("a", KindApp, 1, 1000)}, 10240},
		{"sidecar beside init and beside app", []ContainerRequest{c("s", KindSidecar, 1, 8192), c("i", KindInit, 1, 9831), c("a", KindApp, 1, 8192)}, 18023},
		{"init before sidecar runs alone", []ContainerRequest{c("i", KindInit, 1, 20000), c("s", KindSidecar, 1, 8192), c("a", KindApp, 1, 8192)}, 20000},
		{"percentage counts 0", []ContainerRequest{pct, c("a", KindApp, 1, 1000)}, 1000},
	} {
		// kubelet order: init containers first
		var r PodRequest
		for _, app := range []bool{false, true} {
			for _, x := range tc.cs {
				if (x.Kind == KindApp) == app {
					r.Containers = append(r.Containers, x)
				}
			}
		}
		if got := EffectiveMemoryMiB(r); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// The compute figure: GPUs × cores per GPU, 100 per GPU when exclusive; no cores limit has none.
func TestRequestedCoresPercent(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    ContainerRequest
		pct  int64
		ok   bool
	}{
		{"2 GPUs x 30%", ContainerRequest{Count: 2, CoresPercent: 30}, 60, true},
		{"exclusive on 3 GPUs: 300", ContainerRequest{Count: 3, CoresPercent: 100, MemoryMiB: 1}, 300, true},
		{"no cores limit: unknown", ContainerRequest{Count: 1, MemoryMiB: 1000}, 0, false},
		{"no GPU", ContainerRequest{}, 0, true},
	} {
		pct, ok := RequestedCoresPercent(tc.c)
		if pct != tc.pct || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, pct, ok, tc.pct, tc.ok)
		}
	}
}
