package extender

import (
	"sync/atomic"
)

// Scheduler is the extender's verbs over a Cache (k8s.io/kube-scheduler/extender/v1): Filter
// and Prioritize read the nodes' usage and leave a speculative reservation, Preempt answers what
// a victim's removal frees, and BookForBind and FinishBind take a pod's booking through the
// stages drawn on Cache. It keeps no state of its own: every booking, and every change of one,
// is the Cache's, so that what the informers feed and what the verbs decide meet in one place
// under one lock order. Safe for concurrent use.
type Scheduler struct {
	c *Cache
	// pdb tells which evictions of a victim set violate a PodDisruptionBudget
	// (SetDisruptionCheck); unset: none does.
	pdb atomic.Pointer[DisruptionCheck]
}

// SetDisruptionCheck sets how preemption learns which evictions violate a PodDisruptionBudget
// (the extender sets one backed by its PodDisruptionBudget informer: pdb.go).
func (s *Scheduler) SetDisruptionCheck(check DisruptionCheck) { s.pdb.Store(&check) }

// disruptions returns the disruption check (nil without one).
func (s *Scheduler) disruptions() DisruptionCheck {
	if f := s.pdb.Load(); f != nil {
		return *f
	}
	return nil
}

// NewScheduler returns the verbs over c.
func NewScheduler(c *Cache) *Scheduler { return &Scheduler{c: c} }

// Cache returns the state the verbs read and change.
func (s *Scheduler) Cache() *Cache { return s.c }
