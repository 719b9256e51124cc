package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
	"github.com/hami-go/hami-go/pkg/ledger"
	"github.com/hami-go/hami-go/pkg/nodeagent"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// Options are the injectable parts of a Plugin (tests replace them).
type Options struct {
	// Clock drives health probes, PreStartContainer's wait for the NRI plugin and Lease renewals;
	// default the real clock.
	Clock clock.WithTicker
	// WatchInterval is the period of the fallback poll of the plugin's socket and kubelet.sock
	// (directory events trigger re-serving and re-registration at once); default 5s.
	WatchInterval time.Duration
	// FileExists reports whether a host path exists (HAMi-core library); default os.Stat.
	FileExists func(string) bool
}

// DefaultWatchInterval is the default Options.WatchInterval.
const DefaultWatchInterval = 5 * time.Second

// Plugin is the device plugin: the kubelet-facing gRPC server over a Ledger, a Health state
// machine and the GPUs the backend discovered.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg     Config
	opts    Options
	backend device.Backend
	gpus    []device.GPU
	byUUID  map[string]device.GPU
	health  *gpuhealth.Health
	ledger  *ledger.Ledger
	resp    responder
	// enf is the node's enforcement (Enforcement); Run records the library it installed.
	enf *nodeagent.Enforcement

	// rpcDuration times the kubelet's calls (observeUnary); exported by Collector.
	rpcDuration *prometheus.HistogramVec
	// preStartGate holds or refuses each GPU container's creation until the NRI plugin can apply
	// its plan (PreStartContainer, Drain; prestart.go). The agent joins the NRI plugin's
	// connection with ConnectNRI.
	*preStartGate
	// held returns what the node's pods hold of the names (SetHeld; nil: nothing), and over
	// records by how much that is more than the GPUs offer (PublishedResources, listedDevices).
	held func(names ...corev1.ResourceName) nodeagent.NodeResources
	over nodeagent.Overcommit

	mu         sync.Mutex
	devChanged chan struct{} // closed and replaced on every health change
	// streams counts the kubelet's open ListAndWatch streams that have had the devices;
	// streamsChanged is closed and replaced when that count changes (Serving).
	streams        int
	streamsChanged chan struct{}
	registered     int // successful registrations, for tests and logs
	regFailed      int // failed registration attempts, for tests and logs
}

// New discovers the GPUs and builds a plugin. dirty receives every pod whose claimed record must
// be (re)written (nil: none). It fails when the config is invalid or discovery fails.
// Its PreStartContainer gate is built here over opts.Clock, cfg.PlanWait, cfg.NRISocket and the
// strategy (newPreStartGate); only the NRI plugin's connection joins it later, when the agent
// starts the NRI plugin, which is built over the plugin (preStartGate).
func New(cfg Config, backend device.Backend, opts Options, dirty func(device.PodRef)) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = DefaultWatchInterval
	}
	if opts.FileExists == nil {
		opts.FileExists = func(p string) bool { _, err := os.Stat(p); return err == nil }
	}
	gpus, err := backend.Discover()
	if err != nil {
		return nil, fmt.Errorf("discover GPUs through the %s backend: %w", backend.Name(), err)
	}
	// case C41: the reserve is taken off before anything sees the GPUs (inventory, labels,
	// metrics, Allocate), so the extender never offers it.
	if gpus, err = device.ApplyMemoryReserve("--reserved-memory", gpus, cfg.ReservedMemory); err != nil {
		return nil, err
	}
	for _, g := range gpus {
		if r := cfg.ReservedMemory.ForGPU(g); r > 0 {
			klog.InfoS("Reserving GPU memory used outside Kubernetes", "uuid", g.UUID, "index", g.Index, "reservedMiB", r, "offeredMiB", g.MemoryMiB)
		}
	}
	p := &Plugin{cfg: cfg, opts: opts, backend: backend, byUUID: map[string]device.GPU{}, devChanged: make(chan struct{}), streamsChanged: make(chan struct{}), rpcDuration: newRPCDuration(cfg.NodeName),
		preStartGate: newPreStartGate(opts.Clock, cfg.PlanWait, cfg.NRISocket, cfg.DeviceListStrategy == StrategyCDI)}
	p.over.Node = cfg.NodeName
	var uuids []string
	for _, g := range gpus {
		if g.MIGEnabled {
			klog.InfoS("Skipping GPU in MIG mode (not sliced by hami-go)", "uuid", g.UUID, "index", g.Index)
			continue
		}
		p.gpus = append(p.gpus, g)
		p.byUUID[g.UUID] = g
		uuids = append(uuids, g.UUID)
	}
	p.health = gpuhealth.New(uuids, cfg.ApplicationXIDs, cfg.RecoveryProbes, opts.Clock)
	p.ledger = ledger.New(ledger.Config{Node: cfg.NodeName, Names: cfg.Resources, Dirty: dirty, GPUMemory: p.inventoryMiB})
	// Both read the host through p, so that the plan's mounts and the enforcement check see one
	// host (and tests may swap the backend's name and the host check).
	exists := func(path string) bool { return p.opts.FileExists(path) }
	p.resp = responder{cfg: cfg, gpus: p.byUUID, exists: exists}
	p.enf = nodeagent.NewEnforcement(p.cfg.envConfig, backend, exists)
	return p, nil
}

// Ledger returns the plugin's pod ledger (fed by the pod informer).
func (p *Plugin) Ledger() *ledger.Ledger { return p.ledger }

// Health returns the plugin's health state machine.
func (p *Plugin) Health() *gpuhealth.Health { return p.health }

// GPUs returns the GPUs the plugin slices, in NVML index order.
func (p *Plugin) GPUs() []device.GPU { return append([]device.GPU(nil), p.gpus...) }

// Inventory returns the node inventory with current health.
func (p *Plugin) Inventory() device.Inventory {
	e := p.Enforcement()
	inv := device.Inventory{Node: p.cfg.NodeName, SplitCount: p.cfg.SplitCount, MemoryScaling: p.cfg.MemoryScaling, Enforcement: &e}
	for _, g := range p.gpus {
		g.Healthy = p.health.Healthy(g.UUID)
		g.NVLinkPeers = append([]string(nil), g.NVLinkPeers...)
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

// GPUMemoryMiB is the node's figure of device.ResourceGPUMemory, MiB: over the GPUs the
// extender may place slices on (MIG-enabled ones never are), the memory each offers after the
// reserve and the memory scaling (device.Inventory.CapacityMiB). Unhealthy GPUs count
// (device.NodeGPUMemoryMiB says why).
func (p *Plugin) GPUMemoryMiB() int64 {
	inv := p.Inventory()
	var per []int64
	for i := range inv.GPUs {
		if !inv.GPUs[i].MIGEnabled {
			per = append(per, inv.CapacityMiB(&inv.GPUs[i]))
		}
	}
	return device.NodeGPUMemoryMiB(per)
}

// Enforcement returns the node's slice enforcement as a fact, checked now on the host
// (nodeagent.Enforcement): published in the inventory, exported as a metric, and required by
// every plan applied at container creation.
func (p *Plugin) Enforcement() device.Enforcement { return p.enf.State() }

// SetPreflight takes the node's latest preflight report (nodeagent.Preflight): its fail-open
// window is published with the enforcement; a change republishes the inventory.
func (p *Plugin) SetPreflight(r preflight.Report) {
	if p.enf.SetPreflight(r) {
		p.notifyHealth()
	}
}

// PreflightInput is what the node's preflight checks that only the plugin knows; g is its NRI
// plugin (runtime and connection). Under the cdi strategy it names the toolkit's CDI kind and
// the GPUs, whose <kind>=<UUID> every plan names (preflight.FindingToolkitCDISpec, case C55).
func (p *Plugin) PreflightInput(g *nri.Plugin) preflight.Input {
	dir := ""
	if p.cfg.DeviceListStrategy == StrategyCDI {
		dir = p.cfg.CDISpecDir
	}
	in := p.enf.PreflightInput(g, p.cfg.DeviceListStrategy, dir)
	if p.cfg.DeviceListStrategy == StrategyCDI {
		in.ToolkitCDIKind = p.cfg.ToolkitCDIKind
	}
	for _, gpu := range p.gpus {
		in.GPUUUIDs = append(in.GPUUUIDs, gpu.UUID)
	}
	return in
}

// inventoryMiB returns the memory, MiB, that the published inventory gives the GPU uuid: the
// figure the extender planned a percentage request on (device.GPUMemory).
func (p *Plugin) inventoryMiB(uuid string) (int64, bool) {
	for _, g := range p.Inventory().GPUs {
		if g.UUID == uuid {
			return g.MemoryMiB, true
		}
	}
	return 0, false
}

// Serving reports whether the kubelet has the plugin's devices now: a ListAndWatch stream has
// sent them and is open. The plugin holds the node's Lease only then (publishLoop; case C45).
func (p *Plugin) Serving() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams > 0
}

// ServingChanged returns a channel closed at the next change of the open streams (Serving).
func (p *Plugin) ServingChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streamsChanged
}

func (p *Plugin) addStream(d int) {
	p.mu.Lock()
	p.streams += d
	close(p.streamsChanged)
	p.streamsChanged = make(chan struct{})
	p.mu.Unlock()
}

// HealthChanged returns a channel closed at the next health change.
func (p *Plugin) HealthChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.devChanged
}

func (p *Plugin) notifyHealth() {
	p.mu.Lock()
	close(p.devChanged)
	p.devChanged = make(chan struct{})
	p.mu.Unlock()
}

// OnXID applies an XID event and wakes ListAndWatch when health changed.
func (p *Plugin) OnXID(ev device.XIDEvent) {
	if p.health.OnXID(ev) {
		klog.InfoS("GPU marked unhealthy", "uuid", ev.UUID, "xid", ev.XID)
		p.notifyHealth()
	} else {
		klog.V(4).InfoS("XID event changes nothing", "uuid", ev.UUID, "xid", ev.XID)
	}
}

// ProbeUnhealthy probes every unhealthy GPU once (one step of the recovery signal).
func (p *Plugin) ProbeUnhealthy() {
	for _, u := range gpuhealth.ProbeUnhealthy(p.health, p.backend) {
		klog.InfoS("GPU recovered", "uuid", u)
		p.notifyHealth()
	}
}

// devices is the ListAndWatch list: SplitCount slices per GPU with NUMA topology.
func (p *Plugin) devices() []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(p.gpus)*p.cfg.SplitCount)
	for _, g := range p.gpus {
		h := pluginapi.Healthy
		if !p.health.Healthy(g.UUID) {
			h = pluginapi.Unhealthy
		}
		var topo *pluginapi.TopologyInfo
		if g.NUMANode >= 0 {
			topo = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(g.NUMANode)}}}
		}
		for n := 0; n < p.cfg.SplitCount; n++ {
			out = append(out, &pluginapi.Device{ID: device.SliceID(g.UUID, n), Health: h, Topology: topo})
		}
	}
	return out
}

// ListAndWatch sends the device list, then again on every health change until the stream ends.
// From its first send until it ends the kubelet has the devices (Serving). The list has at least
// as many Healthy devices as the node's running pods hold slices (listedDevices, floorDevices),
// as of each send.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	sent := false
	defer func() {
		if sent {
			p.addStream(-1)
		}
	}()
	for {
		changed := p.HealthChanged()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.listedDevices()}); err != nil {
			return err
		}
		if !sent {
			sent = true
			p.addStream(1)
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

// recoverUnary turns a panic in a handler into an Internal error for the kubelet.
func recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(fmt.Errorf("%v", r), "Panic in device plugin handler", "method", info.FullMethod)
			err = status.Errorf(codes.Internal, "hami-go: internal error in %s: %v", info.FullMethod, r)
		}
	}()
	return h(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			klog.ErrorS(fmt.Errorf("%v", r), "Panic in device plugin stream", "method", info.FullMethod)
			err = status.Errorf(codes.Internal, "hami-go: internal error in %s: %v", info.FullMethod, r)
		}
	}()
	return h(srv, ss)
}

// Registrations returns how many times the plugin registered with the kubelet.
func (p *Plugin) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registered
}
