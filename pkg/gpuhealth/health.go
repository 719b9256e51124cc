// Package gpuhealth is the GPU health state machine both node components use (the device
// plugin and the DRA driver): fatal XIDs mark a GPU unhealthy, consecutive successful probes
// return it to healthy (case C23). It also runs the XID watch and the recovery probes over a
// device.Backend.
package gpuhealth

import (
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
)

// Health is the GPU health state machine (case C23). XIDs in the application list change
// nothing; any other XID marks that GPU (all its slices) unhealthy and resets its recovery
// count. NVML has no "recovered" event, so recovery is a count of consecutive successful
// Backend.Probe calls made after the latest event: RecoveryProbes of them return the GPU to
// healthy; a failed probe starts the count again. Safe for concurrent use.
type Health struct {
	clock   clock.PassiveClock
	appXIDs map[uint64]bool
	needed  int

	mu    sync.Mutex
	state map[string]*gpuHealth
}

type gpuHealth struct {
	healthy   bool
	okProbes  int
	lastXID   uint64
	since     time.Time
	unhealthy int // number of times marked unhealthy, for logs
}

// New tracks the given GPUs, all healthy. appXIDs are the application XIDs that change
// nothing; recoveryProbes (>= 1) is the number of consecutive successful probes that return a
// GPU to healthy.
func New(uuids []string, appXIDs []uint64, recoveryProbes int, clk clock.PassiveClock) *Health {
	h := &Health{clock: clk, appXIDs: map[uint64]bool{}, needed: recoveryProbes, state: map[string]*gpuHealth{}}
	for _, x := range appXIDs {
		h.appXIDs[x] = true
	}
	for _, u := range uuids {
		h.state[u] = &gpuHealth{healthy: true, since: clk.Now()}
	}
	return h
}

// OnXID applies one XID event; it reports whether the GPU's health changed. Unknown GPUs are
// ignored.
func (h *Health) OnXID(ev device.XIDEvent) bool {
	if h.appXIDs[ev.XID] {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.state[ev.UUID]
	if !ok {
		return false
	}
	s.okProbes = 0
	s.lastXID = ev.XID
	if !s.healthy {
		return false
	}
	s.healthy = false
	s.unhealthy++
	s.since = h.clock.Now()
	return true
}

// OnProbe applies one probe result of an unhealthy GPU; it reports whether the GPU became
// healthy.
func (h *Health) OnProbe(uuid string, err error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.state[uuid]
	if !ok || s.healthy {
		return false
	}
	if err != nil {
		s.okProbes = 0
		return false
	}
	s.okProbes++
	if s.okProbes < h.needed {
		return false
	}
	s.healthy = true
	s.okProbes = 0
	s.since = h.clock.Now()
	return true
}

// Healthy reports whether the GPU is healthy (unknown GPUs are not).
func (h *Health) Healthy(uuid string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.state[uuid]
	return ok && s.healthy
}

// Unhealthy lists the unhealthy GPUs, sorted.
func (h *Health) Unhealthy() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for u, s := range h.state {
		if !s.healthy {
			out = append(out, u)
		}
	}
	sort.Strings(out)
	return out
}

// Status is one GPU's health as Health tracks it.
type Status struct {
	// Healthy is false after a fatal XID until recovery.
	Healthy bool
	// LastXID is the latest fatal XID (0 = none yet).
	LastXID uint64
	// Since is when the GPU last changed health (or started being tracked).
	Since time.Time
}

// Status returns the GPU's status; ok is false for an unknown GPU.
func (h *Health) Status(uuid string) (st Status, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.state[uuid]
	if !ok {
		return Status{}, false
	}
	return Status{Healthy: s.healthy, LastXID: s.lastXID, Since: s.since}, true
}
