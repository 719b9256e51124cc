package dra

import (
	"context"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nri"
)

var _ nri.Source = (*Driver)(nil)

// Plan implements nri.Source: the DRA driver never gives the device plugin's pending answer (a
// claim's CDI spec sets the whole env at prepare), so a container carrying it is refused.
func (d *Driver) Plan(_ context.Context, c nri.Container) (nri.Plan, error) {
	return nri.Plan{}, fmt.Errorf("container %s carries an empty %s, which the DRA driver never sets (only hami-go's device plugin does)", c, nri.MarkerEnv)
}

// Granted implements nri.Source for the NRI plugin in DRA mode (case C37): a container's
// GPUs are the hami-go claims among its CDI devices ("gpu.hami-go.io/claim=<claim UID>", the
// ids PrepareResourceClaims returned), and its env is what their CDI specs set (gpuenv.Build of
// each prepared claim; for a name two claims set, the later device's value, as the runtime
// applies the edits in order). A container without such a device has no GPUs from hami-go. A
// device naming a claim this driver has not prepared is an error (the NRI plugin refuses the
// container; the kubelet retries). With Config.ToolkitCDIKind, NVIDIA_VISIBLE_DEVICES is left out:
// the NVIDIA Container Toolkit's CDI spec, applied after the claim's, sets it to "void" (its
// spec-level edits: the devices come as CDI device nodes, not through that variable), which
// names no device, so the NRI plugin leaves it (case C54) instead of refusing every GPU container.
//
// At a container's creation (c.Creating) each claim's stale HAMi-core cache file is removed
// first (case C56; cacheFileAtCreation).
func (d *Driver) Granted(ctx context.Context, c nri.Container) (nri.Granted, error) {
	var out nri.Granted
	for _, name := range c.CDIDevices {
		vendor, class, dev, err := parser.ParseQualifiedName(name)
		if err != nil || vendor != draapi.DriverName || class != CDIClass {
			continue
		}
		uid := types.UID(dev)
		d.mu.Lock()
		p, ok := d.prepared[uid]
		d.mu.Unlock()
		if !ok {
			return nri.Granted{}, fmt.Errorf("CDI device %s names claim %s, which the DRA driver has not prepared", name, uid)
		}
		if out.Env == nil {
			out = nri.Granted{GPU: true, Env: map[string]string{}}
		}
		e := gpuenv.Build(d.cfg.envConfig(), envRequest(uid, p.Grants), d.opts.FileExists)
		if err := d.cacheFileAtCreation(ctx, c, uid, e.CacheFile); err != nil {
			return nri.Granted{}, err
		}
		for k, v := range e.Env {
			out.Env[k] = v
		}
		out.DriverCapabilities = gpuenv.MergeDriverCapabilities(out.DriverCapabilities, e.DriverCapabilities)
		if d.cfg.ToolkitCDIKind != "" {
			delete(out.Env, gpuenv.EnvNVIDIAVisibleDevices)
		}
	}
	return out, nil
}

// cacheFileAtCreation records c as a container of claim uid (by name, and by runtime ID for
// the metrics' process attribution: claimOf) and, when c is being created
// (c.Creating), removes the claim's HAMi-core cache file (host path file; "" = none on the host)
// unless another container is known to use the claim (case C56). A container the kubelet creates
// again (it exited) would otherwise find the slots of its killed processes, which still charge
// their memory (HAMi-core frees a slot only for a process it sees gone, and the new processes
// may reuse their PIDs). The file is the claim's, not the container's: where other containers
// share the claim (of the same pod, or of pods sharing it) it is kept, because removing it
// would split their accounting (each would get the whole limit) and truncating it would fault
// their mappings. Containers are known from their creation or a running one's check at
// Synchronize, and forgotten only at unprepare, so a claim once shared keeps its file
// (the behaviour before C56).
func (d *Driver) cacheFileAtCreation(ctx context.Context, c nri.Container, uid types.UID, file string) error {
	key := c.PodUID + "/" + c.Name
	d.mu.Lock()
	if c.ID != "" {
		if d.containers == nil {
			d.containers = map[string]map[types.UID]bool{}
		}
		if d.containers[c.ID] == nil {
			d.containers[c.ID] = map[types.UID]bool{}
		}
		d.containers[c.ID][uid] = true
	}
	if d.users == nil {
		d.users = map[types.UID]map[string]bool{}
	}
	if d.users[uid] == nil {
		d.users[uid] = map[string]bool{}
	}
	d.users[uid][key] = true
	shared := len(d.users[uid]) > 1
	d.mu.Unlock()
	if !c.Creating || file == "" {
		return nil
	}
	if shared {
		klog.FromContext(ctx).V(2).Info("Keeping a shared claim's HAMi-core cache file at a container's creation", "claimUID", uid, "container", c.String())
		return nil
	}
	if err := os.Remove(file); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("container %s: remove claim %s's stale HAMi-core cache file: %w", c, uid, err)
	}
	return nil
}

// forgetContainersLocked drops claim uid from every container's claims (d.mu held).
func (d *Driver) forgetContainersLocked(uid types.UID) {
	for id, claims := range d.containers {
		delete(claims, uid)
		if len(claims) == 0 {
			delete(d.containers, id)
		}
	}
}
