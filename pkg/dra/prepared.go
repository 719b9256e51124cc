package dra

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

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
