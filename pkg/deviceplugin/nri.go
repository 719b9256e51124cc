package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nri"
)

// nriSource is the NRI plugin's Source in device-plugin mode. Allocate answers every container
// with the pending answer (an empty MarkerEnv: responder.pending), and at CreateContainer, where
// the runtime names the pod, the container claims its pod's own plan (Ledger.ClaimPlanned); the
// NRI plugin then sets the env and CDI devices of that plan.
type nriSource struct{ p *Plugin }

// NRISource returns the NRI plugin's Source over p's ledger.
func NRISource(p *Plugin) nri.Source { return nriSource{p: p} }

// Plan implements nri.Source for a container whose env carries the pending answer: the
// container claims its pod's own plan (Ledger.ClaimPlanned), and the NRI plugin adds the env and
// CDI devices the plan gives (responder.build). It refuses while the node's enforcement is
// missing, and a container carrying hami-go's CDI device beside the empty marker (only the NRI
// plugin adds those). A container its pod plans no GPUs gets the zero Plan.
func (s nriSource) Plan(_ context.Context, c nri.Container) (nri.Plan, error) {
	for _, d := range c.CDIDevices {
		if strings.HasPrefix(d, CDIKind+cdiDeviceNameSeparator) {
			return nri.Plan{}, fmt.Errorf("container %s carries an empty %s beside hami-go's CDI device %s, which only the NRI plugin adds", c, nri.MarkerEnv, d)
		}
	}
	enf := s.p.Enforcement()
	if !enf.Ready {
		// Fail closed: the plan's limits would not hold. The extender places no new pod here
		// (Inventory.Unenforced); a pod placed before the enforcement went missing waits.
		return nri.Plan{}, fmt.Errorf("the node's GPU enforcement (%s) is missing, so container %s's slice limits would not hold: %s", enf.Mode, c, enf.Reason)
	}
	cl, planned, err := s.p.ledger.ClaimPlanned(types.UID(c.PodUID), c.Name)
	if err != nil || !planned {
		return nri.Plan{}, err
	}
	e := s.p.resp.build(cl)
	if enf.Mode == gpuenv.EnforceHAMiCore && !enf.Simulated && !mountsAt(e.Mounts, gpuenv.HAMiContainerLibrary) {
		// The library went between the check above and the plan (issue 36 item 4): the limits
		// without the library would hold nothing. The kubelet retries the creation.
		return nri.Plan{}, fmt.Errorf("the node's HAMi-core library %s is missing, so container %s's slice limits would not hold", enf.Library, c)
	}
	for _, d := range e.Dirs {
		// World-writable: the container's processes may run as any user. The directory is the
		// container's own (named by its pod's UID and its name).
		// On SELinux nodes it is labelled container_file_t (nodeagent.CacheDirMaker).
		if err := s.p.cfg.CacheDirMaker().Make(d); err != nil {
			return nri.Plan{}, fmt.Errorf("create container %s's HAMi-core cache directory: %w", c, err)
		}
	}
	// Case C56: every creation of the container starts with a fresh HAMi-core cache file. A
	// restarted container gets the same "<pod UID>_<container>" file, whose slots still charge
	// its killed processes' memory (HAMi-core frees a slot only for a process it sees gone, and
	// the new processes may reuse their PIDs). The previous instance has exited before the kubelet
	// creates the next, and the file is this container's alone; removing, not truncating, it
	// leaves any mapping still open on the old inode intact.
	if err := removeCacheFile(e.CacheFile); err != nil {
		return nri.Plan{}, fmt.Errorf("container %s: %w", c, err)
	}
	p := nri.Plan{Env: e.Env, CDIDevices: e.CDIDevices, DriverCapabilities: e.DriverCapabilities, Answer: pendingEnv(s.p.cfg)}
	for _, m := range e.Mounts {
		p.Mounts = append(p.Mounts, nri.Mount{Source: m.HostPath, Destination: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	klog.V(2).InfoS("Applying the pod's plan at container creation", "pod", cl.Pod.String(), "container", c.Name, "gpus", e.Env[device.EnvGPUUUIDs], "repeat", cl.Repeat)
	return p, nil
}

// mountsAt reports whether mounts hold one at container path dst.
func mountsAt(mounts []gpuenv.Mount, dst string) bool {
	for _, m := range mounts {
		if m.ContainerPath == dst {
			return true
		}
	}
	return false
}

// removeCacheFile removes a container's HAMi-core cache file (host path; "" = none); one that is
// not there is fine.
func removeCacheFile(path string) error {
	if path == "" {
		return nil
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove the stale HAMi-core cache file: %w", err)
	}
	return nil
}

// Granted implements nri.Source for a container the NRI plugin checks against its claim: GPU
// with the env of its claim when it has one (a running container, reported when the plugin
// reconnects: its env holds what Plan set); no GPU when the ledger plans it none (a pod without
// GPUs, or a container of a GPU pod that asks none); otherwise an error: the container is
// planned GPUs but did not carry the pending answer (its env sets MarkerEnv a second time, or
// names GPUs), so the NRI plugin refuses it.
func (s nriSource) Granted(_ context.Context, c nri.Container) (nri.Granted, error) {
	cl, claimed, planned := s.p.ledger.ContainerClaim(types.UID(c.PodUID), c.Name)
	switch {
	case claimed:
		e := s.p.resp.build(cl)
		return nri.Granted{GPU: true, Env: e.Env, DriverCapabilities: e.DriverCapabilities}, nil
	case planned:
		return nri.Granted{}, fmt.Errorf("container %s of pod %s/%s is planned GPUs, but its env does not carry the device plugin's pending answer (a single empty %s) and it has not claimed its plan", c.Name, c.PodNamespace, c.PodName, nri.MarkerEnv)
	default:
		return nri.Granted{}, nil
	}
}
