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

// nriSource is the NRI env guard's Source in device-plugin mode (case C37): what Allocate
// handed a container is the env the responder builds from the container's claim in the ledger,
// after a reconcile with the kubelet's PodResources (so a claim Allocate took for an
// interchangeable pod is first moved to the pod the kubelet gave the devices to) and with the
// answer the runtime holds (nri.Container.Answered: a claim rebuilt after a restart moves to the
// slot the answer took, case C04).
type nriSource struct {
	p *Plugin
	// reconcile brings the ledger's claims in line with the kubelet's PodResources; nil = none.
	reconcile func(context.Context)
}

// NRISource returns the env guard's Source over p's ledger; reconcile (may be nil) is called
// before a GPU container is looked up.
func NRISource(p *Plugin, reconcile func(context.Context)) nri.Source {
	return nriSource{p: p, reconcile: reconcile}
}

// applyPlan is Allocated for a container whose Allocate answer left the plan to the guard
// (PlanAtCreateContainer; decided by the answer in the container's env, so that a container
// answered before the plugin's --apply-plan-at changed is checked as it was answered): the
// container claims its pod's own plan (Ledger.ClaimPlanned), and the guard adds the env and CDI
// devices the Allocate response would have carried.
func (s nriSource) applyPlan(uid types.UID, c nri.Container) (nri.Allocated, error) {
	for _, d := range c.CDIDevices {
		if strings.HasPrefix(d, CDIKind+cdiDeviceNameSeparator) {
			// Only an Allocate that matched the call (--apply-plan-at=allocate) names hami-go's
			// CDI devices: its answer is in the container, whatever the env's marker says.
			return nri.Allocated{}, fmt.Errorf("container %s carries an empty %s but the CDI device %s of an Allocate answer", c, nri.MarkerEnv, d)
		}
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

// Allocated implements nri.Source: GPU with the env of the Allocate response built from a
// claimed container's claim (the response names no pod, so the claim rebuilds the very answer
// the kubelet gave the container, after a swap or a restart too); no GPU for a container the
// ledger plans none (a pod without GPUs, a pod not placed by hami-go, which Allocate refuses, or
// a container of a GPU pod that asks none); an error for a container planned GPUs but not
// claimed (the guard refuses it; the kubelet retries), or whose answer cannot be reconciled with
// the claims (*ledger.AnsweredError).
func (s nriSource) Allocated(ctx context.Context, c nri.Container) (nri.Allocated, error) {
	uid := types.UID(c.PodUID)
	if c.AnswerPending {
		return s.applyPlan(uid, c)
	}
	_, _, planned := s.p.ledger.ContainerClaim(uid, c.Name)
	if !planned {
		return nri.Allocated{}, nil
	}
	if s.reconcile != nil {
		s.reconcile(ctx)
	}
	if c.Answered != nil {
		if _, err := s.p.ledger.Answered(uid, c.Name, c.Answered); err != nil {
			return nri.Allocated{}, err
		}
	}
	cl, claimed, planned := s.p.ledger.ContainerClaim(uid, c.Name)
	switch {
	case claimed:
		return nri.Allocated{GPU: true, Env: s.p.resp.build(cl).Envs}, nil
	case planned:
		return nri.Allocated{}, fmt.Errorf("container %s of pod %s/%s is planned GPUs but the device plugin has no claim for it yet", c.Name, c.PodNamespace, c.PodName)
	default:
		return nri.Allocated{}, nil
	}
}
