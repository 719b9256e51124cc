package extender

import (
	"sync/atomic"

	"github.com/hami-go/hami-go/pkg/device"
)

// Scheduler is the extender's verbs over a Cache (k8s.io/kube-scheduler/extender/v1): Filter
// and Prioritize read the nodes' usage and leave a speculative reservation, Preempt answers what
// a victim's removal frees, and BookForBind and FinishBind take a pod's booking through the
// stages drawn on Cache. It keeps no state of its own: every booking, and every change of one,
// is the Cache's, so that what the informers feed and what the verbs decide meet in one place
// under one lock order. Safe for concurrent use.
type Scheduler struct {
	c *Cache
	// pdb tells whether evicting a pod violates a PodDisruptionBudget (SetDisruptionCheck);
	// unset: none does.
	pdb atomic.Pointer[func(device.PodRef) bool]
}

// SetDisruptionCheck sets how preemption learns whether evicting a pod violates a
// PodDisruptionBudget (the extender sets one backed by its PodDisruptionBudget informer).
func (s *Scheduler) SetDisruptionCheck(violates func(device.PodRef) bool) { s.pdb.Store(&violates) }

// violatesPDB reports whether evicting pod k violates a PodDisruptionBudget (false without a
// check).
func (s *Scheduler) violatesPDB(k device.PodRef) bool {
	f := s.pdb.Load()
	return f != nil && *f != nil && (*f)(k)
}

// NewScheduler returns the verbs over c.
func NewScheduler(c *Cache) *Scheduler { return &Scheduler{c: c} }

// Cache returns the state the verbs read and change.
func (s *Scheduler) Cache() *Cache { return s.c }
