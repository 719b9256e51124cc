package fake

import (
	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// library is the fleet's gonvml.Interface: go-nvml's mock server, with the calls a long-running
// fake device plugin makes again and again answered directly. The mock records every call's
// arguments in memory (moq's call log) and never forgets them; a per-probe handle lookup by
// UUID would grow that log for as long as the plugin runs.
type library struct {
	*server.Server
	fleet *Fleet
}

var _ gonvml.Interface = (*library)(nil)

// DeviceGetCount is nvmlDeviceGetCount.
func (l *library) DeviceGetCount() (int, gonvml.Return) { return len(l.Devices), gonvml.SUCCESS }

// DeviceGetHandleByIndex is nvmlDeviceGetHandleByIndex: ERROR_INVALID_ARGUMENT out of range.
func (l *library) DeviceGetHandleByIndex(i int) (gonvml.Device, gonvml.Return) {
	if i < 0 || i >= len(l.Devices) {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	return l.Devices[i], gonvml.SUCCESS
}

// DeviceGetHandleByUUID is nvmlDeviceGetHandleByUUID: ERROR_INVALID_ARGUMENT for an unknown
// UUID, as go-nvml's mock server answers.
func (l *library) DeviceGetHandleByUUID(uuid string) (gonvml.Device, gonvml.Return) {
	i, err := l.fleet.index(uuid)
	if err != nil {
		return nil, gonvml.ERROR_INVALID_ARGUMENT
	}
	return l.Devices[i], gonvml.SUCCESS
}

// EventSetCreate is nvmlEventSetCreate: a simulated event set of this fleet.
func (l *library) EventSetCreate() (gonvml.EventSet, gonvml.Return) { return l.fleet.newEventSet() }
