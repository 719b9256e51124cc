package allocator

import (
	"strconv"
	"strings"

	"github.com/hami-go/hami-go/pkg/device"
)

func itoa(i int) string { return strconv.Itoa(i) }

// describe renders a container's request: `container "train" (1 GPU, 8000 MiB, 30 percent cores)`.
//
// Reasons never contain '%': kube-scheduler records an extender's failure reasons in the pod's
// FailedScheduling event through a printf-style call, so "100% memory" reached users as
// "100%!m(MISSING)emory". Percentages are spelled "percent".
func describe(c *device.ContainerRequest) string {
	var b strings.Builder
	b.WriteString("container ")
	b.WriteString(strconv.Quote(c.Name))
	b.WriteString(" (")
	b.WriteString(itoa(c.Count))
	if c.Count == 1 {
		b.WriteString(" GPU, ")
	} else {
		b.WriteString(" GPUs, ")
	}
	switch {
	case c.MemoryMiB > 0:
		b.WriteString(strconv.FormatInt(c.MemoryMiB, 10))
		b.WriteString(" MiB")
	case c.MemoryPercent > 0:
		b.WriteString(itoa(c.MemoryPercent))
		b.WriteString(" percent memory")
	default:
		b.WriteString("100 percent memory")
	}
	if c.CoresPercent > 0 {
		b.WriteString(", ")
		b.WriteString(itoa(c.CoresPercent))
		b.WriteString(" percent cores")
	}
	b.WriteString(")")
	return b.String()
}

// refusalText says why slot si refuses container ci, without the GPU's label.
func (st *state) refusalText(si, ci int, r refusal) string {
	s := &st.slots[si]
	m := st.phaseMax(si, st.ranges[ci])
	switch r {
	case refUnhealthy:
		return "unhealthy"
	case refMIG:
		return "MIG enabled"
	case refUUIDDenied:
		return "(" + shortUUID(s.g.UUID) + ") in " + device.AnnoNoUseGPUUUID
	case refUUIDNotAllowed:
		return "not in " + device.AnnoUseGPUUUID
	case refModel:
		return "model " + strconv.Quote(s.g.Model) + " excluded by " + device.AnnoUseGPUType + "/" + device.AnnoNoUseGPUType
	case refExclusiveHeld:
		return "held exclusively (100 percent cores)"
	case refNotEmpty:
		return "shared by " + itoa(s.used.Sharers+m.sharers) + " (100 percent cores needs an unshared GPU)"
	case refSlices:
		return itoa(s.used.Sharers+max(s.charge.Sharers, m.sharers)) + "/" + itoa(st.split) + " slices used"
	case refMemory:
		free := max(s.capMiB-s.used.MemoryMiB-m.mem, 0)
		return strconv.FormatInt(free, 10) + " of " + strconv.FormatInt(s.capMiB, 10) + " MiB free"
	case refCores:
		return itoa(max(100-s.used.CoresPercent-m.cores, 0)) + " percent cores free"
	}
	return "fits"
}

// shortUUID is the first 8 characters of a UUID ("GPU-8d2c"), enough to tell a node's GPUs apart.
func shortUUID(u string) string {
	if len(u) > 8 {
		return u[:8]
	}
	return u
}

// reason explains why container ci could not be placed, from the state the failed attempt left:
// one entry per distinct refusal, naming the GPUs by index with runs collapsed (GPU-0..3,5), so
// it stays short on an 8-GPU node. The caller adds the node name.
func (st *state) reason(ci int) string {
	c := &st.req.Containers[ci]
	head := describe(c) + ": "
	if c.Count > len(st.slots) {
		return head + "node has " + itoa(len(st.slots)) + " GPUs"
	}
	type group struct {
		text string
		idx  []int
	}
	var groups []group
	fit := 0
	for si := range st.slots {
		r := st.check(si, ci)
		if r == refOK {
			fit++
			continue
		}
		t := st.refusalText(si, ci, r)
		found := false
		for gi := range groups {
			if groups[gi].text == t {
				groups[gi].idx = append(groups[gi].idx, st.slots[si].g.Index)
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, group{t, []int{st.slots[si].g.Index}})
		}
	}
	var b strings.Builder
	b.WriteString(head)
	switch {
	case fit >= c.Count:
		b.WriteString(itoa(fit) + " GPUs fit but no NUMA node has " + itoa(c.Count) + " of them (" + device.AnnoNUMABind + ")")
		if len(groups) > 0 {
			b.WriteString("; ")
		}
	case fit > 0:
		b.WriteString("only " + itoa(fit) + " of " + itoa(c.Count) + " GPUs fit; ")
	}
	for gi, g := range groups {
		if gi > 0 {
			b.WriteString("; ")
		}
		b.WriteString("GPU-")
		b.WriteString(indexList(g.idx))
		b.WriteByte(' ')
		b.WriteString(g.text)
	}
	return b.String()
}

// indexList renders GPU indexes with runs of three or more collapsed: [0 1 2 3 5] -> "0..3,5".
func indexList(idx []int) string {
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(itoa(idx[i]))
		if j > i+1 {
			b.WriteString("..")
			b.WriteString(itoa(idx[j]))
		} else if j == i+1 {
			b.WriteByte(',')
			b.WriteString(itoa(idx[j]))
		}
		i = j + 1
	}
	return b.String()
}
