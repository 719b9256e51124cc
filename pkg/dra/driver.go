package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuhealth"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
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
	held      func(names ...corev1.ResourceName) nodeagent.NodeResources // SetHeld (under hmu)
	over      nodeagent.Overcommit                                       // what PublishedResources raised
	lastOrder []string                                                   // device names in the order RepublishLoop last published

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
