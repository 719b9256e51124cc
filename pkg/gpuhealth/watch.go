package gpuhealth

import (
	"context"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
)

// WatchRetry is how long WatchXIDs waits after the backend's XID watch failed before it
// watches again.
const WatchRetry = 10 * time.Second

// WatchXIDs feeds every XID event of the given GPUs to onXID until ctx ends. A failed
// backend watch is logged and retried every WatchRetry (on clk).
func WatchXIDs(ctx context.Context, b device.Backend, uuids []string, clk clock.Clock, onXID func(device.XIDEvent)) {
	ch := make(chan device.XIDEvent, 64)
	go func() {
		for {
			err := b.WatchXIDs(ctx, uuids, ch)
			if ctx.Err() != nil {
				return
			}
			klog.ErrorS(err, "Cannot watch XID events; retrying in 10s")
			select {
			case <-ctx.Done():
				return
			case <-clk.After(WatchRetry):
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-ch:
			onXID(ev)
		}
	}
}

// ProbeLoop calls probe every interval (on clk) until ctx ends: one step of the recovery
// signal of the unhealthy GPUs (see Health.OnProbe).
func ProbeLoop(ctx context.Context, clk clock.WithTicker, interval time.Duration, probe func()) {
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			probe()
		}
	}
}

// ProbeUnhealthy probes every unhealthy GPU of h once through b and returns the GPUs that
// recovered with this probe, sorted.
func ProbeUnhealthy(h *Health, b device.Backend) []string {
	var rec []string
	for _, u := range h.Unhealthy() {
		if h.OnProbe(u, b.Probe(u)) {
			rec = append(rec, u)
		}
	}
	return rec
}
