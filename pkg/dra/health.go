package dra

import (
	"context"
	"strconv"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
)

// HealthResend is how often WatchHealthStatus re-sends an unchanged report: well inside the
// kubelet's default 30 s health timeout (kubeletplugin.DeviceHealth.HealthCheckTimeout).
const HealthResend = 10 * time.Second

// HealthChanged returns a channel closed at the next health change.
func (d *Driver) HealthChanged() <-chan struct{} {
	d.hmu.Lock()
	defer d.hmu.Unlock()
	return d.changed
}

func (d *Driver) notifyHealth(ctx context.Context) {
	d.hmu.Lock()
	close(d.changed)
	d.changed = make(chan struct{})
	pub := d.publisher
	d.hmu.Unlock()
	if pub != nil {
		if err := pub.PublishResources(ctx, d.Resources()); err != nil {
			klog.ErrorS(err, "Republishing the ResourceSlice after a health change failed", "node", d.cfg.NodeName)
		}
	}
}

// SetPublisher makes every health change republish the driver's resources through p (Run sets
// the kubeletplugin helper).
func (d *Driver) SetPublisher(p Publisher) {
	d.hmu.Lock()
	d.publisher = p
	d.hmu.Unlock()
}

// OnXID applies an XID event: a fatal one taints the GPU's device (draapi.TaintUnhealthy) and
// republishes, and the health stream reports it Unhealthy.
func (d *Driver) OnXID(ctx context.Context, ev device.XIDEvent) {
	if d.health.OnXID(ev) {
		klog.InfoS("GPU marked unhealthy", "uuid", ev.UUID, "xid", ev.XID)
		d.notifyHealth(ctx)
	} else {
		klog.V(4).InfoS("XID event changes nothing", "uuid", ev.UUID, "xid", ev.XID)
	}
}

// ProbeUnhealthy probes every unhealthy GPU once; a recovered GPU loses its taint.
func (d *Driver) ProbeUnhealthy(ctx context.Context) {
	for _, u := range gpuhealth.ProbeUnhealthy(d.health, d.backend) {
		klog.InfoS("GPU recovered", "uuid", u)
		d.notifyHealth(ctx)
	}
}

// HealthReport is the health of every published GPU now.
func (d *Driver) HealthReport() kubeletplugin.DeviceHealthReport {
	var r kubeletplugin.DeviceHealthReport
	for _, g := range d.gpus {
		st, _ := d.health.Status(g.GPU.UUID)
		h := kubeletplugin.DeviceHealth{PoolName: d.cfg.NodeName, DeviceName: DeviceName(g.GPU.Index),
			Health: kubeletplugin.HealthStatusHealthy, LastUpdated: d.opts.Clock.Now(), HealthCheckTimeout: 3 * HealthResend}
		if !st.Healthy {
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = "fatal XID " + strconv.FormatUint(st.LastXID, 10) + " since " + st.Since.UTC().Format(time.RFC3339)
		}
		r.Devices = append(r.Devices, h)
	}
	return r
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: a report of all GPUs now, again on
// every health change and every HealthResend, until ctx ends.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	t := d.opts.Clock.NewTicker(HealthResend)
	defer t.Stop()
	for {
		changed := d.HealthChanged()
		select {
		case <-ctx.Done():
			return nil
		case reports <- d.HealthReport():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-t.C():
		}
	}
}
