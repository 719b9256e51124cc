package device

import "testing"

func TestKeyOf(t *testing.T) {
	names := DefaultResourceNames()
	if _, ok := KeyOf(&PodRequest{}, names); ok {
		t.Error("KeyOf of a pod without GPU containers is ok")
	}
	r := &PodRequest{Containers: []ContainerRequest{
		{Name: "init", Kind: KindInit, Count: 2, MemoryMiB: 100},
		{Name: "app", Kind: KindApp, Count: 1, MemoryMiB: 100},
	}}
	k, ok := KeyOf(r, names)
	if !ok || k != (CallKey{Resource: "nvidia.com/gpu", Count: 2}) {
		t.Errorf("KeyOf = %+v, %v; want nvidia.com/gpu with the first container's count 2", k, ok)
	}
	if k.String() != "nvidia.com/gpu/2" {
		t.Errorf("String() = %q", k.String())
	}
}

func TestSignatureOf(t *testing.T) {
	base := func() PodRequest {
		return PodRequest{Containers: []ContainerRequest{
			{Name: "side", Kind: KindSidecar, Count: 1, MemoryPercent: 10},
			{Name: "main", Kind: KindApp, Count: 2, MemoryMiB: 8000, CoresPercent: 30},
		}}
	}
	b := base()
	sig := SignatureOf(&b)
	if want := Signature("sidecar:1x10%/0;app:2x8000Mi/30;||||"); sig != want {
		t.Errorf("SignatureOf = %q, want %q", sig, want)
	}
	// Equal requests, other container names and policies: equal signatures.
	same := base()
	same.Containers[0].Name, same.Containers[1].Name = "x", "y"
	same.GPUPolicy, same.NodePolicy = Spread, Spread
	if got := SignatureOf(&same); got != sig {
		t.Errorf("renamed containers changed the signature: %q vs %q", got, sig)
	}
	// Any differing figure or constraint: a different signature.
	for name, mutate := range map[string]func(*PodRequest){
		"kind":       func(r *PodRequest) { r.Containers[0].Kind = KindInit },
		"count":      func(r *PodRequest) { r.Containers[1].Count = 3 },
		"MiB":        func(r *PodRequest) { r.Containers[1].MemoryMiB = 8001 },
		"MiB vs pct": func(r *PodRequest) { r.Containers[0].MemoryPercent, r.Containers[0].MemoryMiB = 0, 10 },
		"percent":    func(r *PodRequest) { r.Containers[0].MemoryPercent = 11 },
		"cores":      func(r *PodRequest) { r.Containers[1].CoresPercent = 31 },
		"order":      func(r *PodRequest) { r.Containers[0], r.Containers[1] = r.Containers[1], r.Containers[0] },
		"extra": func(r *PodRequest) {
			r.Containers = append(r.Containers, ContainerRequest{Kind: KindApp, Count: 1, MemoryPercent: 100})
		},
		"use models":    func(r *PodRequest) { r.UseModels = []string{"A10"} },
		"avoid models":  func(r *PodRequest) { r.AvoidModels = []string{"A10"} },
		"use uuids":     func(r *PodRequest) { r.UseUUIDs = []string{"GPU-a"} },
		"avoid uuids":   func(r *PodRequest) { r.AvoidUUIDs = []string{"GPU-a"} },
		"numa":          func(r *PodRequest) { r.NUMABind = true },
		"use vs avoid":  func(r *PodRequest) { r.UseModels, r.AvoidModels = nil, []string{"A10"} },
		"two vs joined": func(r *PodRequest) { r.UseUUIDs = []string{"GPU-a", "GPU-b"} },
	} {
		r := base()
		mutate(&r)
		if got := SignatureOf(&r); got == sig {
			t.Errorf("%s: signature unchanged (%q)", name, got)
		}
	}
	a, b2 := base(), base()
	a.UseModels, b2.AvoidModels = []string{"A10"}, []string{"A10"}
	if SignatureOf(&a) == SignatureOf(&b2) {
		t.Error("use-gputype and nouse-gputype of the same model give one signature")
	}
}
