package allocator

import "github.com/hami-go/hami-go/pkg/device"

// phaseRange is the contiguous run of phases [lo, hi] a container is active in. With nInit classic
// init containers, phase k < nInit is "init container k runs, beside the sidecars declared before
// it" and phase nInit is "all sidecars and all app containers run". This is the rule of
// device.PodRequest.Phases (k8s.io/component-helpers resource.PodRequests, case C03), in a form
// that needs no allocation: a classic init container is active in its own phase only, a sidecar
// in the phases of every later init container and the final one, an app container in the final
// one. Unknown kinds count as app containers.
type phaseRange struct{ lo, hi int }

// phaseRanges fills out[i] with the phase range of the i-th of n containers, whose kind kind(i)
// gives, and returns the number of phases (classic init containers + 1).
func phaseRanges(n int, kind func(i int) device.ContainerKind, out []phaseRange) int {
	nInit := 0
	for i := 0; i < n; i++ {
		if kind(i) == device.KindInit {
			nInit++
		}
	}
	seen := 0
	for i := 0; i < n; i++ {
		switch kind(i) {
		case device.KindInit:
			out[i] = phaseRange{seen, seen}
			seen++
		case device.KindSidecar:
			out[i] = phaseRange{seen, nInit}
		default:
			out[i] = phaseRange{nInit, nInit}
		}
	}
	return nInit + 1
}

// ChargeOf computes the charge of an allocation (planned or claimed) from the allocation alone:
// per GPU and per field (MiB, cores percent, sharers), the largest sum over the pod's phases of
// the containers active in that phase (ContainerAllocation.Kind, case C03). Exclusive is set on a
// GPU where any container has 100% cores. The figures equal what Fit and Pick book for the same
// placement. A nil allocation charges nothing.
func ChargeOf(a *device.Allocation) Charge {
	c := Charge{}
	if a == nil || len(a.Containers) == 0 {
		return c
	}
	ranges := make([]phaseRange, len(a.Containers))
	nph := phaseRanges(len(a.Containers), func(i int) device.ContainerKind { return a.Containers[i].Kind }, ranges)
	sums := map[string][]usageSum{}
	for i := range a.Containers {
		r := ranges[i]
		for _, d := range a.Containers[i].Devices {
			s := sums[d.UUID]
			if s == nil {
				s = make([]usageSum, nph)
				sums[d.UUID] = s
			}
			for p := r.lo; p <= r.hi; p++ {
				s[p].add(d.MemoryMiB, d.CoresPercent, d.CoresPercent >= 100)
			}
		}
	}
	for uuid, s := range sums {
		var g GPUUsage
		for _, p := range s {
			g.raise(p)
		}
		c[uuid] = g
	}
	return c
}

// usageSum is what the containers of one phase book on one GPU.
type usageSum struct {
	mem     int64
	cores   int
	sharers int
	excl    bool
}

func (s *usageSum) add(mem int64, cores int, excl bool) {
	s.mem += mem
	s.cores += cores
	s.sharers++
	s.excl = s.excl || excl
}

// raise lifts each field of g to at least the phase sum s.
func (g *GPUUsage) raise(s usageSum) {
	g.MemoryMiB = max(g.MemoryMiB, s.mem)
	g.CoresPercent = max(g.CoresPercent, s.cores)
	g.Sharers = max(g.Sharers, s.sharers)
	g.Exclusive = g.Exclusive || s.excl
}

// Add books c onto u: each field adds up; Exclusive is set where c holds a GPU exclusively.
func (u NodeUsage) Add(c Charge) {
	for uuid, x := range c {
		g := u[uuid]
		g.MemoryMiB += x.MemoryMiB
		g.CoresPercent += x.CoresPercent
		g.Sharers += x.Sharers
		g.Exclusive = g.Exclusive || x.Exclusive
		u[uuid] = g
	}
}

// Sub releases c from u: each field subtracts, never below zero; Exclusive is cleared where c held
// the GPU exclusively. A GPU with nothing left booked is removed from u.
func (u NodeUsage) Sub(c Charge) {
	for uuid, x := range c {
		g, ok := u[uuid]
		if !ok {
			continue
		}
		g.MemoryMiB = max(g.MemoryMiB-x.MemoryMiB, 0)
		g.CoresPercent = max(g.CoresPercent-x.CoresPercent, 0)
		g.Sharers = max(g.Sharers-x.Sharers, 0)
		if x.Exclusive {
			g.Exclusive = false
		}
		if g == (GPUUsage{}) {
			delete(u, uuid)
		} else {
			u[uuid] = g
		}
	}
}
