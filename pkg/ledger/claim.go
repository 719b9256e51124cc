package ledger

import "github.com/hami-go/hami-go/pkg/device"

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
