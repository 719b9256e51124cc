package device

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MemoryReserve is GPU memory kept out of the inventory because something outside Kubernetes
// uses it (a display server, a monitoring agent, a process the node runs itself; HAMi #1069,
// case C41). The device plugin (--reserved-memory) and the DRA driver subtract it from each
// GPU's memory before they publish it, so the scheduler never offers it.
//
// Order with the memory scaling factor: the reserve is subtracted from the physical memory
// first, and the scaling factor applies to what is left: capacity = (total − reserved) ×
// scaling. The reserve is memory that is really used, so it is never over-committed.
type MemoryReserve struct {
	// AllMiB is reserved on every GPU that ByUUID and ByIndex do not name, MiB >= 0.
	AllMiB int64
	// ByUUID is the reserve of one GPU by NVML UUID ("GPU-8d2c…"), MiB >= 0.
	ByUUID map[string]int64
	// ByIndex is the reserve of one GPU by NVML index, MiB >= 0. ByUUID wins when both name a GPU.
	ByIndex map[int]int64
}

// ParseMemoryReserve reads the value of flag (e.g. "--reserved-memory"): comma-separated
// entries, each either a bare amount (every GPU) or <GPU>=<amount>, where <GPU> is an NVML UUID
// (GPU-…) or an index (0, 1, …). Amounts follow ParseMemoryMiB (3000 = 3000 MiB, 2Gi = 2048
// MiB), and 0 is allowed (no reserve). Examples: "2048", "1024,GPU-8d2c=4096,3=0". An empty
// value reserves nothing. Errors name the flag and the entry.
func ParseMemoryReserve(flag, s string) (MemoryReserve, error) {
	var r MemoryReserve
	all := false
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		key, amount, named := strings.Cut(e, "=")
		if !named {
			amount, key = key, ""
		}
		key, amount = strings.TrimSpace(key), strings.TrimSpace(amount)
		mib, err := parseReserveMiB(amount)
		if err != nil {
			return MemoryReserve{}, fmt.Errorf("%s: entry %q: %v", flag, e, err)
		}
		switch {
		case !named:
			if all {
				return MemoryReserve{}, fmt.Errorf("%s: entry %q: a reserve for every GPU is already given", flag, e)
			}
			all, r.AllMiB = true, mib
		case strings.HasPrefix(key, "GPU-") || strings.HasPrefix(key, "MIG-"):
			if _, dup := r.ByUUID[key]; dup {
				return MemoryReserve{}, fmt.Errorf("%s: entry %q: GPU %s is named twice", flag, e, key)
			}
			if r.ByUUID == nil {
				r.ByUUID = map[string]int64{}
			}
			r.ByUUID[key] = mib
		default:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || strconv.Itoa(i) != key {
				return MemoryReserve{}, fmt.Errorf("%s: entry %q: %q is neither a GPU UUID (GPU-…) nor a GPU index (0, 1, …)", flag, e, key)
			}
			if _, dup := r.ByIndex[i]; dup {
				return MemoryReserve{}, fmt.Errorf("%s: entry %q: GPU index %d is named twice", flag, e, i)
			}
			if r.ByIndex == nil {
				r.ByIndex = map[int]int64{}
			}
			r.ByIndex[i] = mib
		}
	}
	return r, nil
}

// parseReserveMiB is ParseMemoryMiB with 0 allowed.
func parseReserveMiB(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a quantity of MiB (e.g. 2048 or 2Gi)", s)
	}
	if q.IsZero() {
		return 0, nil
	}
	return ParseMemoryMiB("amount", q)
}

// String renders r in ParseMemoryReserve's syntax (entries sorted), "" when it reserves nothing.
func (r MemoryReserve) String() string {
	var parts []string
	if r.AllMiB > 0 {
		parts = append(parts, strconv.FormatInt(r.AllMiB, 10))
	}
	var named []string
	for u, v := range r.ByUUID {
		named = append(named, u+"="+strconv.FormatInt(v, 10))
	}
	for i, v := range r.ByIndex {
		named = append(named, strconv.Itoa(i)+"="+strconv.FormatInt(v, 10))
	}
	sort.Strings(named)
	return strings.Join(append(parts, named...), ",")
}

// ForGPU returns the MiB reserved on g: its UUID entry, else its index entry, else AllMiB.
func (r MemoryReserve) ForGPU(g GPU) int64 {
	if v, ok := r.ByUUID[g.UUID]; ok {
		return v
	}
	if v, ok := r.ByIndex[g.Index]; ok {
		return v
	}
	return r.AllMiB
}

// OfferedMemoryMiB is the memory of a GPU with totalMiB that may be offered once reservedMiB is
// kept back: totalMiB − reservedMiB. It fails when nothing (or less than 1 MiB) would be left
// or a figure is negative.
func OfferedMemoryMiB(totalMiB, reservedMiB int64) (int64, error) {
	if totalMiB <= 0 || reservedMiB < 0 {
		return 0, fmt.Errorf("GPU memory %d MiB with %d MiB reserved: figures must be positive", totalMiB, reservedMiB)
	}
	if reservedMiB >= totalMiB {
		return 0, fmt.Errorf("%d MiB reserved on a GPU of %d MiB leaves nothing to offer", reservedMiB, totalMiB)
	}
	return totalMiB - reservedMiB, nil
}

// ApplyMemoryReserve returns gpus with each GPU's MemoryMiB lowered to OfferedMemoryMiB (the
// input is not changed). It fails, naming flag, the GPU and the figures, when a reserve leaves
// a GPU nothing, or when r names a UUID or index that no GPU has (a typo would otherwise
// reserve nothing without a word).
func ApplyMemoryReserve(flag string, gpus []GPU, r MemoryReserve) ([]GPU, error) {
	out := make([]GPU, len(gpus))
	uuids, indexes := map[string]bool{}, map[int]bool{}
	for i, g := range gpus {
		uuids[g.UUID], indexes[g.Index] = true, true
		mib, err := OfferedMemoryMiB(g.MemoryMiB, r.ForGPU(g))
		if err != nil {
			return nil, fmt.Errorf("%s: GPU %s (index %d): %v", flag, g.UUID, g.Index, err)
		}
		g.MemoryMiB = mib
		out[i] = g
	}
	for u := range r.ByUUID {
		if !uuids[u] {
			return nil, fmt.Errorf("%s: no GPU on this node has UUID %s", flag, u)
		}
	}
	for i := range r.ByIndex {
		if !indexes[i] {
			return nil, fmt.Errorf("%s: no GPU on this node has index %d", flag, i)
		}
	}
	return out, nil
}
