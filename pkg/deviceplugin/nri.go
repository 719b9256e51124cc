package deviceplugin

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/pkg/nri"
)

// ContainerClaim returns the claim of container name of pod uid (a copy): claimed is true when
// Allocate (or Reconcile, or the pod's claimed record after a restart) claimed it; planned is true
// when the pod's plan gives the container GPUs (false: the pod is not in the ledger, or the
// container has no GPUs). Terminating pods are included.
func (l *Ledger) ContainerClaim(uid types.UID, name string) (cl Claim, claimed, planned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.pods[uid]
	if !ok {
		e, ok = l.leaving[uid]
	}
	if !ok {
		return Claim{}, false, false
	}
	if c, ok := e.claimed[name]; ok {
		return Claim{Pod: e.ref, Container: cloneContainer(c)}, true, true
	}
	return Claim{}, false, e.plan.Container(name) != nil
}

// nriSource is the NRI env guard's Source in device-plugin mode (case C37): what Allocate
// handed a container is the env the responder builds from the container's claim in the ledger,
// after a reconcile with the kubelet's PodResources (so a claim Allocate took for an
// interchangeable pod is first moved to the pod the kubelet gave the devices to).
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

// Allocated implements nri.Source: GPU with the Allocate response's env for a claimed container;
// no GPU for a container the ledger plans none (a pod without GPUs, a pod not placed by
// hami-go, which Allocate refuses, or a container of a GPU pod that asks none); an error for a
// container planned GPUs but not claimed (the guard refuses it; the kubelet retries).
func (s nriSource) Allocated(ctx context.Context, c nri.Container) (nri.Allocated, error) {
	uid := types.UID(c.PodUID)
	_, _, planned := s.p.ledger.ContainerClaim(uid, c.Name)
	if !planned {
		return nri.Allocated{}, nil
	}
	if s.reconcile != nil {
		s.reconcile(ctx)
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
