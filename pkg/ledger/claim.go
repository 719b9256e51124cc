package ledger

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/pkg/device"
)

// unplacedPod is a pod on this node that asks for the count resource but cannot be served.
type unplacedPod struct {
	ref device.PodRef
	why string
}

// Claim is the result of a successful Allocate match: the pod and the container whose slot
// the call took, with the devices it gets (never derived from the kubelet's IDs: C18, C19, C22).
type Claim struct {
	Pod device.PodRef
	// Container is a copy of the claimed container allocation; SliceIDs are the kubelet's IDs.
	Container device.ContainerAllocation
	// Repeat is true when the call repeated an earlier one (kubelet at container start).
	Repeat bool
}

// ErrNoPod is returned by Ledger.TryAllocate when no pod waits for the call yet: the caller may
// wait for the informer and try again. Pods are the pods on this node that ask for the count
// resource but cannot be served (not placed by hami-go, or a malformed plan): the call is most
// likely one of theirs.
type ErrNoPod struct {
	Reason string
	Pods   []device.PodRef
}

func (e *ErrNoPod) Error() string { return e.Reason }

// Concerns returns the pods the refusal names.
func (e *ErrNoPod) Concerns() []device.PodRef { return e.Pods }

// ErrConfusable is the refusal of an Allocate call that could serve any of several pods with
// different requests (case C20). Pods are those pods, in the order the plugin saw them.
type ErrConfusable struct {
	Reason string
	Pods   []device.PodRef
}

func (e *ErrConfusable) Error() string { return e.Reason }

// Concerns returns the pods the refusal names.
func (e *ErrConfusable) Concerns() []device.PodRef { return e.Pods }

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
