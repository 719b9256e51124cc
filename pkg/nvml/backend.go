package nvml

import (
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
)

// Options configures a Backend. The zero value is valid: name "nvml", the real clock, a 1 s
// event wait and a 1 s pause after a failed event wait.
type Options struct {
	// Name is what Backend.Name reports: "nvml" (default) or "fake" for a pkg/fake library.
	Name string
	// Clock stamps XID events and times the pause after a failed event wait; default real time.
	Clock clock.WithTicker
	// EventWait is the timeout of one nvmlEventSetWait call (millisecond resolution), and so
	// the longest WatchXIDs takes to notice its context ended; default 1 s, at most 1 h.
	EventWait time.Duration
	// PCIDevicesDir is where sysfs lists PCI devices ("/sys/bus/pci/devices"); when set, a GPU
	// whose NUMA node NVML cannot tell gets it from <dir>/<bus id>/numa_node. "" = NVML only.
	PCIDevicesDir string
	// ErrorPause is how long WatchXIDs waits after an event wait that failed with anything but
	// a timeout, before it waits again; default 1 s.
	ErrorPause time.Duration
}

// withDefaults fills the zero fields of o.
func (o Options) withDefaults() Options {
	if o.Name == "" {
		o.Name = "nvml"
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.EventWait <= 0 {
		o.EventWait = time.Second
	}
	if o.EventWait > time.Hour {
		o.EventWait = time.Hour
	}
	if o.ErrorPause <= 0 {
		o.ErrorPause = time.Second
	}
	return o
}

// backend implements device.Backend over one gonvml.Interface.
type backend struct {
	lib  gonvml.Interface
	opts Options
}

// NewBackend returns a device.Backend that queries lib: the real driver (see Open), a go-nvml
// mock server, or a pkg/fake fleet's Library. lib must already be initialized (Init called);
// the backend never calls Init or Shutdown. It is safe for concurrent use as far as lib is (the
// real NVML is thread-safe; so are go-nvml's mocks and pkg/fake).
func NewBackend(lib gonvml.Interface, opts Options) device.Backend {
	return &backend{lib: lib, opts: opts.withDefaults()}
}

// Name is Options.Name: "nvml" or "fake".
func (b *backend) Name() string { return b.opts.Name }

// handle looks a GPU up by UUID.
func (b *backend) handle(uuid string) (gonvml.Device, error) {
	return call("nvmlDeviceGetHandleByUUID", uuid, func() (gonvml.Device, gonvml.Return) {
		return b.lib.DeviceGetHandleByUUID(uuid)
	})
}
