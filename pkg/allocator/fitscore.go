package allocator

import "github.com/hami-go/hami-go/pkg/device"

// FitScore is Fit and Score in one pass over the node's GPUs: it returns Score(inv, used, req)
// and nil when req fits, else 0 and Fit's error (an *Unfit with the same Reason). For a pod
// with one GPU container (the common case) it reads each GPU's usage once, allocates nothing
// and needs no placement; otherwise it runs Fit and then Score.
func FitScore(inv *device.Inventory, used NodeUsage, req *device.PodRequest) (int, error) {
	return FitScoreAt(inv, nil, used, req)
}

// FitScoreAt is FitScore with the node's usage also given by GPU position: at[i] is
// used[inv.GPUs[i].UUID] (a compact copy the caller keeps beside the map, so that the common path
// hashes no UUID). at is ignored unless len(at) == len(inv.GPUs); used is what the full
// placement reads when the one-pass path cannot decide.
func FitScoreAt(inv *device.Inventory, at []GPUUsage, used NodeUsage, req *device.PodRequest) (int, error) {
	if req == nil || len(req.Containers) == 0 {
		return Score(inv, used, req), nil
	}
	if inv != nil && len(req.Containers) == 1 {
		if len(at) != len(inv.GPUs) {
			at = nil
		}
		if s, ok := fitScoreAlone(inv, at, used, req); ok {
			return s, nil
		}
	}
	if err := Fit(inv, used, req); err != nil {
		return 0, err
	}
	return Score(inv, used, req), nil
}

// fitScoreAlone is the one-pass fast path of Score and FitScore (fitsAlone plus the node totals
// after placement): ok is true when the pod's single GPU
// container fits (Count GPUs pass capacityRefusal; NUMABind with several GPUs is left to the full
// placement) and its memory figure is the same on every healthy, non-MIG GPU, so that the
// node's totals after placement do not depend on which GPUs Pick chooses.
func fitScoreAlone(inv *device.Inventory, at []GPUUsage, used NodeUsage, req *device.PodRequest) (score int, ok bool) {
	c := &req.Containers[0]
	n := c.Count
	if n <= 0 || n > len(inv.GPUs) || inv.SplitCount < 1 || (req.NUMABind && n > 1) {
		return 0, false
	}
	var mc modelCache
	var t nodeTotals
	found := 0
	mem := int64(-1)
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		var u GPUUsage
		if at != nil {
			u = at[i]
		} else {
			u = used[g.UUID]
		}
		static := staticRefusal(g, req, &mc)
		capMiB := inv.CapacityMiB(g)
		if static == refOK && capacityRefusal(c, g, capMiB, inv.SplitCount, u, GPUUsage{}, usageSum{}) == refOK {
			found++
		}
		if !g.Healthy || g.MIGEnabled {
			continue
		}
		if m := c.MemoryOn(g.MemoryMiB); mem < 0 {
			mem = m
		} else if m != mem {
			return 0, false
		}
		t.add(u.MemoryMiB, capMiB, u.Sharers, inv.SplitCount)
	}
	if found < n {
		return 0, false
	}
	t.mem += int64(n) * mem
	t.sharers += int64(n)
	return t.score(req.NodePolicy), true
}

// UsageAt fills dst (reallocated when too short) with used[inv.GPUs[i].UUID] by GPU position and
// returns it: the compact form FitScoreAt reads. A nil inventory gives an empty slice.
func UsageAt(inv *device.Inventory, used NodeUsage, dst []GPUUsage) []GPUUsage {
	if inv == nil {
		return dst[:0]
	}
	if cap(dst) < len(inv.GPUs) {
		dst = make([]GPUUsage, len(inv.GPUs))
	}
	dst = dst[:len(inv.GPUs)]
	for i := range inv.GPUs {
		dst[i] = used[inv.GPUs[i].UUID]
	}
	return dst
}
