package deviceplugin

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nri"
)

// nriSource is the NRI env guard's Source in device-plugin mode (case C37). Allocate answers
// every container with the pending answer (an empty MarkerEnv: responder.pending), and at
// CreateContainer, where the runtime names the pod, the container claims its pod's own plan
// (Ledger.ClaimPlanned); the guard then sets the env and CDI devices of that plan.
type nriSource struct{ p *Plugin }

// NRISource returns the env guard's Source over p's ledger.
func NRISource(p *Plugin) nri.Source { return nriSource{p: p} }

// applyPlan is Allocated for a container whose env carries the pending answer: the container
// claims its pod's own plan (Ledger.ClaimPlanned), and the guard adds the env and CDI devices
// the plan's answer carries (responder.build).
func (s nriSource) applyPlan(uid types.UID, c nri.Container) (nri.Allocated, error) {
	for _, d := range c.CDIDevices {
		if strings.HasPrefix(d, CDIKind+cdiDeviceNameSeparator) {
			// The device plugin never answers Allocate with hami-go's CDI devices: only the
			// guard adds them, after this check.
			return nri.Allocated{}, fmt.Errorf("container %s carries an empty %s beside hami-go's CDI device %s, which only the guard adds", c, nri.MarkerEnv, d)
		}
	}
	if e := s.p.Enforcement(); !e.Ready {
		// Fail closed: the plan's limits would not hold. The extender places no new pod here
		// (Inventory.Unenforced); a pod placed before the enforcement went missing waits.
		return nri.Allocated{}, fmt.Errorf("the node's GPU enforcement (%s) is missing, so container %s's slice limits would not hold: %s", e.Mode, c, e.Reason)
	}
	cl, planned, err := s.p.ledger.ClaimPlanned(uid, c.Name)
	if err != nil || !planned {
		return nri.Allocated{}, err
	}
	resp := s.p.resp.build(cl)
	a := nri.Allocated{GPU: true, Env: resp.Envs, Pending: true}
	for _, d := range resp.CdiDevices {
		a.CDIDevices = append(a.CDIDevices, d.Name)
	}
	klog.V(2).InfoS("Applying the pod's plan at container creation", "pod", cl.Pod.String(), "container", c.Name, "gpus", resp.Envs[device.EnvGPUUUIDs], "repeat", cl.Repeat)
	return a, nil
}

// Allocated implements nri.Source. A container with the pending answer claims its plan
// (applyPlan). Any other container is one the guard checks against its claim: GPU with the env
// of its claim when it has one (a running container, reported when the guard reconnects: its
// env holds what applyPlan set); no GPU when the ledger plans it none (a pod without GPUs, or a
// container of a GPU pod that asks none); otherwise an error: the container is planned GPUs but
// did not carry the pending answer (its env sets MarkerEnv a second time, or names GPUs), so the
// guard refuses it.
func (s nriSource) Allocated(_ context.Context, c nri.Container) (nri.Allocated, error) {
	uid := types.UID(c.PodUID)
	if c.AnswerPending {
		return s.applyPlan(uid, c)
	}
	cl, claimed, planned := s.p.ledger.ContainerClaim(uid, c.Name)
	switch {
	case claimed:
		return nri.Allocated{GPU: true, Env: s.p.resp.build(cl).Envs}, nil
	case planned:
		return nri.Allocated{}, fmt.Errorf("container %s of pod %s/%s is planned GPUs, but its env does not carry the device plugin's pending answer (a single empty %s) and it has not claimed its plan", c.Name, c.PodNamespace, c.PodName, nri.MarkerEnv)
	default:
		return nri.Allocated{}, nil
	}
}
