package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// Options are the injectable parts of a Driver (tests replace them).
type Options struct {
	// Clock drives probes and health resends; default the real clock.
	Clock clock.WithTicker
	// FileExists reports whether a host path exists (HAMi-core library); default os.Stat.
	FileExists func(string) bool
	// PCIeRoot returns a GPU's PCIe root ("pci0000:00") from its extended BDF bus id, "" when
	// unknown; default none (Run passes the sysfs reader for the NVML backend).
	PCIeRoot func(busID string) string
	// PIDResolver maps the host PIDs NVML lists to container IDs for the per-claim memory use
	// (hami_go_slice_memory_used_bytes); nil = no per-claim use (cmd/dra-driver passes
	// metrics.ProcCgroupResolver over the host's /proc).
	PIDResolver metrics.PIDResolver
}

// Publisher publishes the node's ResourceSlices (the kubeletplugin helper's PublishResources).
type Publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

// Driver is the DRA driver: the kubeletplugin.DRAPlugin over the GPUs the backend discovered,
// a health state machine and the prepared claims (checkpointed).
type Driver struct {
	cfg     Config
	opts    Options
	backend device.Backend
	gpus    []GPUInfo // static facts, NVML index order; health is read from health
	view    gpuView
	health  *gpuhealth.Health
	cdi     *cdiWriter
	ckpt    string

	mu       sync.Mutex
	prepared map[types.UID]Prepared
	// users are the containers ("<pod UID>/<name>") the NRI plugin saw with each prepared
	// claim's CDI device (Granted), so that a container's creation removes the claim's HAMi-core
	// cache file only where no other container may share it (case C56); forgotten at unprepare.
	users map[types.UID]map[string]bool
	// containers are the claims each container (by runtime ID, nri.Container.ID) got through
	// its CDI devices (Granted), for attributing GPU processes to claims (Collector); forgotten
	// at unprepare, as users.
	containers map[string]map[types.UID]bool
	// unprepared is closed and replaced (under mu) whenever Unprepare removes prepared claims.
	unprepared chan struct{}
	// enf is the node's enforcement (Enforcement); Run records the library it installed.
	enf *nodeagent.Enforcement

	hmu       sync.Mutex
	changed   chan struct{} // closed and replaced on every health change
	publisher Publisher
	lastOrder []string // device names in the order RepublishLoop last published

	reorder chan struct{} // a change of prepared claims (capacity 1; see useChanged)

	// fatal ends Run with the error (set by Run before the helper starts; nil: log only).
	fatal func(error)
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New discovers the GPUs, reads their facts and the checkpoint, and builds a driver. It fails
// on an invalid config, a failed discovery, an unreadable checkpoint or CDI directory.
func New(cfg Config, backend device.Backend, opts Options) (*Driver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.FileExists == nil {
		opts.FileExists = func(p string) bool { _, err := os.Stat(p); return err == nil }
	}
	if opts.PCIeRoot == nil {
		opts.PCIeRoot = func(string) string { return "" }
	}
	found, err := backend.Discover()
	if err != nil {
		return nil, fmt.Errorf("discover GPUs through the %s backend: %w", backend.Name(), err)
	}
	d := &Driver{cfg: cfg, opts: opts, backend: backend, changed: make(chan struct{}), reorder: make(chan struct{}, 1), unprepared: make(chan struct{}),
		ckpt: filepath.Join(cfg.PluginDataDir, CheckpointName)}
	d.enf = nodeagent.NewEnforcement(d.cfg.envConfig, backend, func(path string) bool { return d.opts.FileExists(path) })
	d.view = gpuView{pool: cfg.NodeName, byName: map[string]GPUInfo{}, slice: d.sliceConfig()}
	facts, _ := backend.(device.FactsSource)
	var uuids []string
	for _, g := range found {
		if g.MIGEnabled {
			klog.InfoS("Skipping GPU in MIG mode (not sliced by hami-go)", "uuid", g.UUID, "index", g.Index)
			continue
		}
		gi := GPUInfo{GPU: g, PCIeRoot: opts.PCIeRoot(PCIBusID(g.PCIBusID))}
		if facts != nil {
			if gi.Facts, err = facts.Facts(g.UUID); err != nil {
				return nil, fmt.Errorf("read the facts of GPU %s: %w", g.UUID, err)
			}
		}
		d.gpus = append(d.gpus, gi)
		d.view.byName[DeviceName(g.Index)] = gi
		uuids = append(uuids, g.UUID)
	}
	// The reserve's rule and checks are the device plugin's (case C41): a typo'd UUID or index,
	// or a reserve that leaves a GPU nothing, is refused here rather than published silently.
	plain := make([]device.GPU, len(d.gpus))
	for i, gi := range d.gpus {
		plain[i] = gi.GPU
	}
	if _, err := device.ApplyMemoryReserve("--reserved-memory", plain, cfg.ReservedMemory); err != nil {
		return nil, err
	}
	d.health = gpuhealth.New(uuids, cfg.ApplicationXIDs, cfg.RecoveryProbes, opts.Clock)
	if err := os.MkdirAll(cfg.PluginDataDir, 0o750); err != nil {
		return nil, fmt.Errorf("--plugin-data-dir %s: %w", cfg.PluginDataDir, err)
	}
	if d.prepared, err = loadCheckpoint(d.ckpt); err != nil {
		return nil, err
	}
	d.sweepCacheDirs()
	if d.cdi, err = newCDIWriter(cfg.CDIDir); err != nil {
		return nil, err
	}
	return d, nil
}

// sweepCacheDirs removes the HAMi-core cache directories (named by claim UID) of claims that are
// not prepared: unprepared while no driver ran. A name with "_" is a device-plugin container's
// (a node switched modes keeps its pods) and is left alone.
func (d *Driver) sweepCacheDirs() {
	dir := d.cfg.HAMiCacheDir
	if dir == "" {
		return
	}
	removed, err := nodeagent.SweepCacheDirs(dir, func(name string) bool {
		_, prepared := d.prepared[types.UID(name)]
		return !strings.Contains(name, "_") && !prepared
	})
	if err != nil {
		klog.ErrorS(err, "Removing HAMi-core cache directories of claims not prepared failed", "dir", dir)
	}
	if len(removed) > 0 {
		klog.InfoS("Removed HAMi-core cache directories of claims not prepared", "dir", dir, "count", len(removed))
	}
}

func (d *Driver) sliceConfig() SliceConfig {
	return SliceConfig{SplitCount: d.cfg.SplitCount, MemoryScaling: d.cfg.MemoryScaling, ReservedMemory: d.cfg.ReservedMemory, Enforcement: d.Enforcement()}
}

// Enforcement returns the node's slice enforcement as a fact, checked now on the host
// (nodeagent.Enforcement): published on the devices, exported as a metric, and required by
// every claim the driver prepares.
func (d *Driver) Enforcement() device.Enforcement { return d.enf.State() }

// SetPreflight takes the node's latest preflight report (nodeagent.Preflight); its fail-open
// window is exported with the enforcement.
func (d *Driver) SetPreflight(r preflight.Report) { d.enf.SetPreflight(r) }

// PreflightInput is what the node's preflight checks that only the driver knows; g is its NRI
// plugin (runtime and connection). The driver names devices through CDI only, each GPU also as
// <ToolkitCDIKind>=<UUID> (preflight.FindingToolkitCDISpec, case C56).
func (d *Driver) PreflightInput(g *nri.Plugin) preflight.Input {
	in := d.enf.PreflightInput(g, preflight.StrategyCDI, d.cfg.CDIDir)
	in.ToolkitCDIKind = d.cfg.ToolkitCDIKind
	for _, gpu := range d.gpus {
		in.GPUUUIDs = append(in.GPUUUIDs, gpu.GPU.UUID)
	}
	return in
}

// Health returns the driver's health state machine.
func (d *Driver) Health() *gpuhealth.Health { return d.health }

// GPUs returns the GPUs the driver publishes, in NVML index order.
func (d *Driver) GPUs() []GPUInfo { return append([]GPUInfo(nil), d.gpus...) }

// GPUMemoryMiB is the node's figure of device.ResourceGPUMemory, MiB: the sum of the memory
// capacities of the devices the driver publishes (Devices: BookableMiB of each GPU, after the
// reserve and the memory scaling), what DRA's allocator may place. Tainted (unhealthy) devices
// count (device.NodeGPUMemoryMiB says why).
func (d *Driver) GPUMemoryMiB() int64 {
	var per []int64
	for _, dev := range Devices(d.gpus, d.sliceConfig()) {
		if c, ok := dev.Capacity[draapi.CapacityMemory]; ok {
			per = append(per, c.Value.Value()/MiB)
		}
	}
	return device.NodeGPUMemoryMiB(per)
}

// Resources is what the driver publishes now: one pool named after the node with one slice
// of Devices (health applied as taints), in the configured DeviceOrder of the prepared claims'
// use (Order).
func (d *Driver) Resources() resourceslice.DriverResources {
	gpus := Order(d.gpus, UseOf(d.Prepared()), d.sliceConfig(), d.cfg.DeviceOrder)
	for i := range gpus {
		if st, ok := d.health.Status(gpus[i].GPU.UUID); ok && !st.Healthy {
			gpus[i].Unhealthy = &Unhealthy{XID: st.LastXID, Since: st.Since}
		}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.cfg.NodeName: {Slices: []resourceslice.Slice{{Devices: Devices(gpus, d.sliceConfig())}}},
	}}
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin: each claim's GPUs (its allocation
// results for this driver, in their order) get one CDI spec named by the claim UID with the
// shared builder's env and mounts; the result names that CDI device (on the first GPU, for all
// requests, listed on it) and, with ToolkitCDIKind, <kind>=<UUID> per GPU. Preparing a prepared claim
// again returns the same result. Refusals are per claim; a failed checkpoint write fails the
// claims this call prepared (and removes their specs).
//
// A claim that does not fit beside the claims already prepared on its GPUs waits up to
// Config.PrepareWait for Unprepare calls to free room before it is refused: the API frees a
// force-deleted pod's capacity before the kubelet has stopped its containers and unprepared its
// claims, and the kubelet retries a refused prepare only at its next pod sync (about a minute).
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	start := d.opts.Clock.Now()
	deadline := start.Add(d.cfg.PrepareWait)
	d.mu.Lock()
	defer d.mu.Unlock()
	logger := klog.FromContext(ctx)
	defer func() {
		for _, c := range claims {
			if out[c.UID].Err == nil {
				logger.V(2).Info("Prepared", "claim", klog.KObj(c), "uid", c.UID, "duration", d.opts.Clock.Since(start))
			}
		}
	}()
	var added []types.UID
	for pending := claims; len(pending) > 0; {
		var noRoom []*resourceapi.ResourceClaim
		for _, c := range pending {
			p, isNew, err := d.prepareOne(c)
			if err != nil {
				out[c.UID] = kubeletplugin.PrepareResult{Err: err}
				if errors.As(err, new(noRoomError)) && d.opts.Clock.Now().Before(deadline) {
					noRoom = append(noRoom, c)
					continue
				}
				logger.Error(err, "Prepare refused", "claim", klog.KObj(c), "uid", c.UID)
				continue
			}
			if isNew {
				added = append(added, c.UID)
			}
			out[c.UID] = kubeletplugin.PrepareResult{Devices: d.resultDevices(p)}
		}
		if len(noRoom) > 0 {
			logger.V(2).Info("Waiting for prepared claims to be unprepared", "claims", len(noRoom), "first", klog.KObj(noRoom[0]), "err", out[noRoom[0].UID].Err)
			if !d.waitUnprepare(ctx, deadline) {
				for _, c := range noRoom {
					err := fmt.Errorf("%w (no Unprepare freed room within --prepare-wait %s)", out[c.UID].Err, d.cfg.PrepareWait)
					out[c.UID] = kubeletplugin.PrepareResult{Err: err}
					logger.Error(err, "Prepare refused", "claim", klog.KObj(c), "uid", c.UID)
				}
				noRoom = nil
			}
		}
		pending = noRoom
	}
	if len(added) > 0 {
		if err := saveCheckpoint(d.ckpt, d.prepared); err != nil {
			for _, uid := range added {
				delete(d.prepared, uid)
				_ = d.cdi.remove(uid)
				out[uid] = kubeletplugin.PrepareResult{Err: err}
			}
		} else {
			d.useChanged()
		}
	}
	return out, nil
}

// waitUnprepare releases d.mu until an Unprepare removes a prepared claim (true), or ctx ends
// or deadline passes (false); it returns with d.mu held.
func (d *Driver) waitUnprepare(ctx context.Context, deadline time.Time) bool {
	ch := d.unprepared
	d.mu.Unlock()
	defer d.mu.Lock()
	t := d.opts.Clock.NewTimer(deadline.Sub(d.opts.Clock.Now()))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	case <-t.C():
		return false
	}
}

// noRoomError is checkFits' refusal: the claims prepared on a GPU leave no room for the claim.
type noRoomError struct{ error }

func (e noRoomError) Unwrap() error { return e.error }

// prepareOne prepares one claim under d.mu; isNew is false for a repeat.
func (d *Driver) prepareOne(c *resourceapi.ResourceClaim) (Prepared, bool, error) {
	grants, err := d.view.resolve(c)
	if err != nil {
		return Prepared{}, false, err
	}
	if old, ok := d.prepared[c.UID]; ok && sameGrants(old.Grants, grants) {
		if d.opts.FileExists(filepath.Join(d.cfg.CDIDir, ClaimSpecName(c.UID))) {
			return old, false, nil
		}
	} else if e := d.Enforcement(); !e.Ready {
		// Fail closed: the claim's limits would not hold (the devices carry
		// draapi.TaintEnforcementMissing, so only a claim allocated before it went missing gets
		// here). A claim prepared before keeps its spec: its containers run already.
		return Prepared{}, false, fmt.Errorf("claim %s/%s: the node's GPU enforcement (%s) is missing, so the slice's limits would not hold: %s", c.Namespace, c.Name, e.Mode, e.Reason)
	} else if err := d.checkFits(c.UID, grants); err != nil {
		return Prepared{}, false, fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
	}
	e := gpuenv.Build(d.cfg.envConfig(), envRequest(c.UID, grants), d.opts.FileExists)
	for _, dir := range e.Dirs {
		// The claim's HAMi-core cache directory (--hami-core-cache-dir), writable by any user
		// its containers run as, labelled container_file_t on SELinux nodes (nodeagent.CacheDirMaker).
		if err := d.cfg.CacheDirMaker().Make(dir); err != nil {
			return Prepared{}, false, fmt.Errorf("claim %s/%s: create its HAMi-core cache directory: %w", c.Namespace, c.Name, err)
		}
	}
	if err := d.cdi.write(c.UID, ClaimSpec(c.UID, e)); err != nil {
		return Prepared{}, false, err
	}
	p := Prepared{Namespace: c.Namespace, Name: c.Name, UID: c.UID, Grants: grants}
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "pods" {
			p.Pod = r.Name
			break
		}
	}
	d.prepared[c.UID] = p
	return p, true, nil
}

// checkFits is the driver's last line of defense (kubeletplugin.DRAPlugin docs): the claim's
// consumption plus every other prepared claim's must fit each GPU's capacities: memory in MiB up
// to BookableMiB, cores up to 100 percent, sharers up to the split count. Grants with admin
// access (Grant.AdminAccess) consume nothing, as in kube-scheduler's accounting: they are left
// out of the sums, and such a grant of the claim itself always fits.
func (d *Driver) checkFits(uid types.UID, grants []Grant) error {
	for _, g := range grants {
		if !g.Consumes() {
			continue
		}
		mem, cores, sharers := g.MemoryMiB, int64(g.CoresPercent), g.Sharers
		for ouid, p := range d.prepared {
			if ouid == uid {
				continue
			}
			for _, o := range p.Grants {
				if o.UUID == g.UUID && o.Consumes() {
					mem += o.MemoryMiB
					cores += int64(o.CoresPercent)
					sharers += o.Sharers
				}
			}
		}
		gi := d.view.byName[g.Device]
		if c := BookableMiB(gi.GPU, d.view.slice); mem > c {
			return noRoomError{fmt.Errorf("GPU %s (%s) would hold %d MiB of prepared claims, above its %d MiB", g.UUID, g.Device, mem, c)}
		}
		if cores > 100 {
			return noRoomError{fmt.Errorf("GPU %s (%s) would hold %d%% cores of prepared claims, above 100%%", g.UUID, g.Device, cores)}
		}
		if sharers > int64(d.cfg.SplitCount) {
			return noRoomError{fmt.Errorf("GPU %s (%s) would have %d sharers, above the split count %d", g.UUID, g.Device, sharers, d.cfg.SplitCount)}
		}
	}
	return nil
}

func sameGrants(a, b []Grant) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// resultDevices is the kubelet's view of a prepared claim.
func (d *Driver) resultDevices(p Prepared) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, len(p.Grants))
	var all []string // every request of the claim, each once: the claim's CDI device serves them all
	for _, g := range p.Grants {
		if !slices.Contains(all, g.Request) {
			all = append(all, g.Request)
		}
	}
	for i, g := range p.Grants {
		dev := kubeletplugin.Device{Requests: []string{g.Request}, PoolName: g.Pool, DeviceName: g.Device}
		if i == 0 {
			dev.Requests = all
			dev.CDIDeviceIDs = append(dev.CDIDeviceIDs, ClaimCDIDevice(p.UID))
		}
		if k := d.cfg.ToolkitCDIKind; k != "" {
			dev.CDIDeviceIDs = append(dev.CDIDeviceIDs, k+"="+g.UUID)
		}
		if g.ShareID != "" {
			s := g.ShareID
			dev.ShareID = &s
		}
		out[i] = dev
	}
	return out
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: it removes each claim's CDI spec
// and checkpoint entry. A claim that is not prepared is not an error (its spec is removed if
// one is left over).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	d.mu.Lock()
	defer d.mu.Unlock()
	removed := map[types.UID]Prepared{}
	for _, c := range claims {
		if err := d.cdi.remove(c.UID); err != nil {
			out[c.UID] = err
			continue
		}
		if p, ok := d.prepared[c.UID]; ok {
			removed[c.UID] = p
			delete(d.prepared, c.UID)
		}
		delete(d.users, c.UID)
		d.forgetContainersLocked(c.UID)
		out[c.UID] = nil
		klog.FromContext(ctx).V(2).Info("Unprepared", "claim", c.String())
	}
	if len(removed) > 0 {
		if err := saveCheckpoint(d.ckpt, d.prepared); err != nil {
			for uid, p := range removed {
				d.prepared[uid] = p
				out[uid] = err
			}
			return out, nil
		}
		for uid := range removed {
			// The kubelet unprepares a claim once every container using it has stopped.
			if dir := d.cfg.HAMiCacheDir; dir != "" {
				if err := nodeagent.RemoveCacheDir(dir, string(uid)); err != nil {
					klog.FromContext(ctx).Error(err, "Removing an unprepared claim's HAMi-core cache directory failed", "claimUID", uid)
				}
			}
		}
		d.useChanged()
		close(d.unprepared) // wakes the prepares waiting for room
		d.unprepared = make(chan struct{})
	}
	return out, nil
}

// Prepared returns the prepared claims (a copy), for metrics and tests.
func (d *Driver) Prepared() []Prepared {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Prepared, 0, len(d.prepared))
	for _, p := range d.prepared {
		out = append(out, p)
	}
	return out
}

// HandleError implements kubeletplugin.DRAPlugin: background errors (ResourceSlice publishing)
// are logged; recoverable ones are retried by the helper; an unrecoverable one (a slice the API
// server rejects or prunes) ends Run with it, so the DaemonSet restarts the driver and the
// error shows in its status, as the helper's documentation recommends.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.fatal != nil {
		d.fatal(fmt.Errorf("%s: %w", msg, err))
	}
}
