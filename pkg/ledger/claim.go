package ledger

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/pkg/device"
)

// unplacedPod is a pod on this node that asks for the count resource but cannot be served.
type unplacedPod struct {
	ref device.PodRef
	why string
}

// Claim is a container's claim of its pod's plan: the pod and the container, with the devices
// it gets (the pod's planned ones, never derived from the kubelet's device IDs: C18, C19, C22).
type Claim struct {
	Pod device.PodRef
	// Container is a copy of the claimed container allocation (no SliceIDs).
	Container device.ContainerAllocation
	// Repeat is true when the container had claimed already (the runtime creates it again after
	// it exited, or a restarted plugin restored the claim).
	Repeat bool
}

// ContainerClaim returns the claim of container name of pod uid (a copy): claimed is true when
// ClaimPlanned (or the pod's claimed record after a restart) claimed it; planned is true
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

// ClaimPlanned claims container name of pod uid with the pod's own planned allocation, when the
// runtime creates the container (the NRI plugin, docs/design.md "Slot protocol: the
// decision"): the runtime names the pod there, so no two pods can take each other's GPUs. The
// claim carries no slice IDs (the kubelet's IDs name no GPU of the pod's). A container claimed
// already (the runtime creates it again after it exited) gets its claim back, Repeat set.
//
// planned is false when the ledger plans the container no GPUs: a pod without GPUs, a container
// of a GPU pod that asks none, or a pod the informer has not delivered yet. Errors (planned
// true): the pod uses the count resource but cannot be served (not placed by hami-go, or a plan
// that does not grant what it asks: case C36), or it terminates and never claimed the container.
func (l *Ledger) ClaimPlanned(uid types.UID, name string) (cl Claim, planned bool, err error) {
	l.mu.Lock()
	e, ok := l.pods[uid]
	if !ok {
		defer l.mu.Unlock()
		if u, bad := l.unplaced[uid]; bad {
			return Claim{}, true, errors.New(u.why)
		}
		e, ok := l.leaving[uid]
		switch {
		case !ok || e.plan.Container(name) == nil:
			return Claim{}, false, nil
		case e.claimed[name] != nil:
			return Claim{Pod: e.ref, Container: cloneContainer(e.claimed[name]), Repeat: true}, true, nil
		}
		return Claim{}, true, fmt.Errorf("pod %s terminates; its container %s gets no GPU", e.ref, name)
	}
	if c, ok := e.claimed[name]; ok {
		defer l.mu.Unlock()
		return Claim{Pod: e.ref, Container: cloneContainer(c), Repeat: true}, true, nil
	}
	c := e.plan.Container(name)
	if c == nil {
		l.mu.Unlock()
		return Claim{}, false, nil
	}
	e.claimed[name] = c
	out := Claim{Pod: e.ref, Container: cloneContainer(c)}
	l.mu.Unlock()
	if l.dirty != nil {
		l.dirty(e.ref)
	}
	return out, true, nil
}
