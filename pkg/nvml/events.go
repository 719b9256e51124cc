package nvml

import (
	"context"
	"errors"
	"reflect"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// watched is one GPU registered for XID events.
type watched struct {
	uuid   string
	handle gonvml.Device
}

// WatchXIDs registers the given GPUs for NVML critical XID events (EventTypeXidCriticalError) on
// one event set and sends each event to out until ctx ends; then it frees the set and returns
// ctx.Err(). It returns an *Error at once when the set cannot be created, a UUID is unknown, or
// registration fails with anything but NOT_SUPPORTED (such a GPU is logged and not watched).
//
// Each nvmlEventSetWait lasts at most Options.EventWait; a failed wait is logged and retried
// after Options.ErrorPause. An event whose device is not one of the watched GPUs, or is nil, is
// sent once for every watched GPU, as NVIDIA's k8s-device-plugin does (internal/rm/health.go:
// an XID it cannot attribute marks all devices unhealthy). Event time is Options.Clock's now.
func (b *backend) WatchXIDs(ctx context.Context, uuids []string, out chan<- device.XIDEvent) error {
	set, err := call("nvmlEventSetCreate", "", b.lib.EventSetCreate)
	if err != nil {
		return err
	}
	defer func() {
		if err := call0("nvmlEventSetFree", "", set.Free); err != nil {
			klog.ErrorS(err, "Freeing NVML event set")
		}
	}()
	devs := make([]watched, 0, len(uuids))
	for _, uuid := range uuids {
		h, err := b.handle(uuid)
		if err != nil {
			return err
		}
		err = call0("nvmlDeviceRegisterEvents", uuid, func() gonvml.Return {
			return h.RegisterEvents(gonvml.EventTypeXidCriticalError, set)
		})
		if err != nil {
			var e *Error
			if errors.As(err, &e) && e.Panic == nil && unsupported(e.Return) {
				klog.InfoS("GPU does not report XID events; its health is not watched", "uuid", uuid, "reason", err.Error())
				continue
			}
			return err
		}
		devs = append(devs, watched{uuid: uuid, handle: h})
	}
	klog.V(2).InfoS("Watching XID events", "backend", b.opts.Name, "gpus", len(devs))

	timeoutMs := uint32(b.opts.EventWait.Milliseconds())
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := call("nvmlEventSetWait", "", func() (gonvml.EventData, gonvml.Return) {
			return set.Wait(timeoutMs)
		})
		if IsReturn(err, gonvml.ERROR_TIMEOUT) {
			continue
		}
		if err != nil {
			klog.ErrorS(err, "Waiting for NVML events", "retryIn", b.opts.ErrorPause)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-b.opts.Clock.After(b.opts.ErrorPause):
			}
			continue
		}
		if data.EventType != gonvml.EventTypeXidCriticalError {
			klog.V(4).InfoS("Ignoring NVML event", "type", data.EventType, "data", data.EventData)
			continue
		}
		now := b.opts.Clock.Now()
		targets := attribute(devs, data.Device)
		if len(targets) != 1 {
			klog.InfoS("XID event on an unknown device; reporting it for every watched GPU", "xid", data.EventData)
		}
		for _, uuid := range targets {
			klog.V(2).InfoS("XID event", "uuid", uuid, "xid", data.EventData)
			select {
			case out <- device.XIDEvent{UUID: uuid, XID: data.EventData, Time: now}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// attribute returns the UUID of the watched GPU whose handle is dev, or every watched UUID
// when dev is nil or none matches. Handles are compared by value (the real library's handles
// and go-nvml's mock pointers are comparable); the UUID is asked of dev only as a fallback,
// since a lost GPU may no longer answer it.
func attribute(devs []watched, dev gonvml.Device) []string {
	if dev != nil {
		if t := reflect.TypeOf(dev); t.Comparable() {
			for _, w := range devs {
				if reflect.TypeOf(w.handle) == t && w.handle == dev {
					return []string{w.uuid}
				}
			}
		}
		if uuid, err := call("nvmlDeviceGetUUID", "event device", dev.GetUUID); err == nil {
			for _, w := range devs {
				if w.uuid == uuid {
					return []string{w.uuid}
				}
			}
		}
	}
	all := make([]string, len(devs))
	for i, w := range devs {
		all[i] = w.uuid
	}
	return all
}
