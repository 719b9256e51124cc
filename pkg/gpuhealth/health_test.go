package gpuhealth

import (
	"errors"
	"reflect"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
)

var t0 = time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)

// The state machine of case C23 (moved here from pkg/deviceplugin).
func TestHealthStateMachine(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	h := New([]string{"GPU-A"}, []uint64{13}, 2, clk)
	if h.OnXID(device.XIDEvent{UUID: "GPU-A", XID: 13}) {
		t.Fatal("XID 13 changed health")
	}
	if !h.OnXID(device.XIDEvent{UUID: "GPU-A", XID: 48}) {
		t.Fatal("XID 48 did not mark unhealthy")
	}
	if h.OnProbe("GPU-A", nil) {
		t.Fatal("recovered after 1 probe, want 2")
	}
	// A new event resets the count: probes are counted after the latest event.
	h.OnXID(device.XIDEvent{UUID: "GPU-A", XID: 48})
	if h.OnProbe("GPU-A", nil) {
		t.Fatal("recovered after 1 probe following a new event")
	}
	if !h.OnProbe("GPU-A", nil) || !h.Healthy("GPU-A") {
		t.Fatal("not recovered after 2 probes")
	}
	if h.OnXID(device.XIDEvent{UUID: "GPU-Z", XID: 79}) {
		t.Fatal("unknown GPU changed health")
	}
}

// A failed probe starts the count again; Status and Unhealthy report what the machine holds.
func TestFailedProbeAndStatus(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	h := New([]string{"GPU-B", "GPU-A"}, nil, 2, clk)
	if st, ok := h.Status("GPU-A"); !ok || st != (Status{Healthy: true, Since: t0}) {
		t.Fatalf("initial status %+v %v", st, ok)
	}
	if _, ok := h.Status("GPU-Z"); ok || h.Healthy("GPU-Z") {
		t.Fatal("an unknown GPU has a status or is healthy")
	}
	clk.Step(time.Minute)
	h.OnXID(device.XIDEvent{UUID: "GPU-B", XID: 79})
	h.OnXID(device.XIDEvent{UUID: "GPU-A", XID: 13}) // no application XIDs: 13 is fatal here
	if got := h.Unhealthy(); !reflect.DeepEqual(got, []string{"GPU-A", "GPU-B"}) {
		t.Fatalf("Unhealthy = %v, want sorted GPU-A, GPU-B", got)
	}
	// A second fatal XID on an unhealthy GPU changes nothing but the last XID.
	clk.Step(time.Minute)
	if h.OnXID(device.XIDEvent{UUID: "GPU-B", XID: 94}) {
		t.Fatal("an unhealthy GPU changed health again")
	}
	if st, _ := h.Status("GPU-B"); st != (Status{Healthy: false, LastXID: 94, Since: t0.Add(time.Minute)}) {
		t.Fatalf("GPU-B status %+v", st)
	}
	h.OnProbe("GPU-B", nil)
	h.OnProbe("GPU-B", errors.New("no answer"))
	if h.OnProbe("GPU-B", nil) {
		t.Fatal("recovered after a failed probe and 1 good one, want 2 good ones in a row")
	}
	clk.Step(time.Minute)
	if !h.OnProbe("GPU-B", nil) {
		t.Fatal("not recovered after 2 good probes in a row")
	}
	if st, _ := h.Status("GPU-B"); st != (Status{Healthy: true, LastXID: 94, Since: t0.Add(3 * time.Minute)}) {
		t.Fatalf("recovered GPU-B status %+v", st)
	}
	if h.OnProbe("GPU-B", nil) {
		t.Fatal("a probe of a healthy GPU reported a recovery")
	}
}

// probeBackend answers Probe from a map; the rest of device.Backend is not used.
type probeBackend struct {
	device.Backend
	fail map[string]bool
}

func (b probeBackend) Probe(uuid string) error {
	if b.fail[uuid] {
		return errors.New("no answer")
	}
	return nil
}

func TestProbeUnhealthy(t *testing.T) {
	h := New([]string{"GPU-A", "GPU-B", "GPU-C"}, nil, 1, clocktesting.NewFakeClock(t0))
	h.OnXID(device.XIDEvent{UUID: "GPU-C", XID: 79})
	h.OnXID(device.XIDEvent{UUID: "GPU-A", XID: 79})
	h.OnXID(device.XIDEvent{UUID: "GPU-B", XID: 79})
	got := ProbeUnhealthy(h, probeBackend{fail: map[string]bool{"GPU-B": true}})
	if !reflect.DeepEqual(got, []string{"GPU-A", "GPU-C"}) {
		t.Fatalf("recovered %v, want GPU-A and GPU-C", got)
	}
	if u := h.Unhealthy(); !reflect.DeepEqual(u, []string{"GPU-B"}) {
		t.Fatalf("still unhealthy %v, want GPU-B", u)
	}
}
