package dra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// recordingPublisher stands in for the kubeletplugin helper in unit tests: it keeps what was
// published.
type recordingPublisher struct {
	mu  sync.Mutex
	got []resourceslice.DriverResources
}

func (r *recordingPublisher) PublishResources(_ context.Context, res resourceslice.DriverResources) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, res)
	return nil
}

func (r *recordingPublisher) last(t *testing.T) resourceslice.DriverResources {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		t.Fatal("nothing published")
	}
	return r.got[len(r.got)-1]
}

// case C23 in DRA mode: a fatal XID taints the GPU's device (NoSchedule) and republishes; an
// application XID changes nothing; RecoveryProbes good probes remove the taint again. The
// health stream reports the same.
func TestXIDTaintAndRecovery(t *testing.T) {
	cfg := testConfig(t.TempDir())
	d, clk := newTestDriver(t, cfg, "dgxh100")
	pub := &recordingPublisher{}
	d.SetPublisher(pub)
	uuid := d.GPUs()[1].GPU.UUID
	d.OnXID(bg, device.XIDEvent{UUID: uuid, XID: 13})
	if len(pub.got) != 0 {
		t.Fatal("application XID 13 republished")
	}
	clk.Step(time.Minute)
	d.OnXID(bg, device.XIDEvent{UUID: uuid, XID: 79})
	devs := pub.last(t).Pools[testNode].Slices[0].Devices
	for i, dev := range devs {
		if i == 1 {
			if len(dev.Taints) != 1 || dev.Taints[0].Key != draapi.TaintUnhealthy || dev.Taints[0].Value != "xid-79" || !dev.Taints[0].TimeAdded.Time.Equal(t0.Add(time.Minute)) {
				t.Fatalf("gpu-1 taints = %+v", dev.Taints)
			}
		} else if len(dev.Taints) != 0 {
			t.Fatalf("%s tainted: %+v", dev.Name, dev.Taints)
		}
	}
	rep := d.HealthReport()
	if rep.Devices[1].Health != kubeletplugin.HealthStatusUnhealthy || rep.Devices[1].DeviceName != "gpu-1" || !strings.Contains(rep.Devices[1].Message, "fatal XID 79") ||
		rep.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("health report = %+v", rep.Devices[:2])
	}
	if v := gpuGauge(t, d, "hami_go_gpu_healthy", uuid); v != 0 {
		t.Fatalf("hami_go_gpu_healthy = %v, want 0", v)
	}
	for i := 0; i < cfg.RecoveryProbes; i++ {
		if n := len(pub.got); i < cfg.RecoveryProbes-1 && n != 1 {
			t.Fatalf("republished after %d probes", i)
		}
		d.ProbeUnhealthy(bg)
	}
	if len(pub.got) != 2 {
		t.Fatalf("%d publications, want 2 (taint, recovery)", len(pub.got))
	}
	for _, dev := range pub.last(t).Pools[testNode].Slices[0].Devices {
		if len(dev.Taints) != 0 {
			t.Fatalf("%s still tainted after recovery", dev.Name)
		}
	}
	if d.HealthReport().Devices[1].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatal("health report still unhealthy after recovery")
	}
}

// WatchHealthStatus sends a report at once, again on a health change and again every
// HealthResend, and returns nil when its context ends.
func TestWatchHealthStatus(t *testing.T) {
	d, clk := newTestDriver(t, testConfig(t.TempDir()), "dgxh100")
	ctx, cancel := context.WithCancel(bg)
	ch := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, ch) }()
	if r := <-ch; len(r.Devices) != 8 || r.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first report %+v", r)
	}
	d.OnXID(bg, device.XIDEvent{UUID: d.GPUs()[0].GPU.UUID, XID: 48})
	if r := <-ch; r.Devices[0].Health != kubeletplugin.HealthStatusUnhealthy {
		t.Fatalf("report after XID %+v", r.Devices[0])
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(HealthResend)
	if r := <-ch; r.Devices[0].Health != kubeletplugin.HealthStatusUnhealthy {
		t.Fatalf("resent report %+v", r.Devices[0])
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// An unrecoverable background error of the helper ends Run (through the driver's fatal hook);
// a recoverable one is only logged.
func TestHandleError(t *testing.T) {
	d, _ := newTestDriver(t, testConfig(t.TempDir()), "dgxh100")
	var got []error
	d.fatal = func(err error) { got = append(got, err) }
	d.HandleError(bg, fmt.Errorf("transient: %w", kubeletplugin.ErrRecoverable), "publish")
	if len(got) != 0 {
		t.Fatalf("recoverable error ended the driver: %v", got)
	}
	d.HandleError(bg, errors.New("invalid slice"), "publish")
	if len(got) != 1 || got[0].Error() != "publish: invalid slice" {
		t.Fatalf("fatal = %v", got)
	}
}
