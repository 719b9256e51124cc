// Package extender is hami-go's kube-scheduler extender: the filter, prioritize, bind and preempt
// verbs of k8s.io/kube-scheduler/extender/v1 over an in-memory cache of node inventories, node
// liveness and pod GPU usage, fed by client-go shared informers (../../docs/components.md,
// docs/design.md "Device-plugin mode").
package extender

import (
	"fmt"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
)

// Config is everything the extender is configured with. cmd/scheduler-extender fills it from
// flags (docs/components.md); tests build it directly.
type Config struct {
	// SchedulerName is the kube-scheduler profile whose pods are the extender's
	// (--scheduler-name). Pods of other profiles that still reach the extender (extenders are
	// global to kube-scheduler) pass Filter on every node, score 0, and are bound without a plan.
	SchedulerName string
	// Resources are the extended-resource names pods use (--resource-*).
	Resources device.ResourceNames
	// NodePolicy scores nodes when the pod has no hami.io/node-scheduler-policy annotation (--node-policy).
	NodePolicy device.Policy
	// GPUPolicy picks GPUs when the pod has no hami.io/gpu-scheduler-policy annotation (--gpu-policy).
	GPUPolicy device.Policy
	// StaleAfter is the Lease age after which a node's inventory is stale (--inventory-stale-after).
	StaleAfter time.Duration
	// LeaseNamespace holds the device plugins' Leases hami-go-<node> (--lease-namespace).
	LeaseNamespace string
	// The extender's timers, one job each (none is a flag; DefaultConfig sets them). Bound pods
	// are never dropped by a timer (case C14).
	//
	// ReservationTTL drops a reservation that no Bind confirmed within this time: a speculative
	// one (made by Filter), or one pinned to its node because its bind's outcome is unknown
	// (booking.maybeBound, which the informer settles sooner when the pod shows up).
	ReservationTTL time.Duration
	// GoneTTL is how long a released pod's reference is remembered, so that a Filter or a Bind
	// racing the release cannot book the pod again.
	GoneTTL time.Duration
	// SweepInterval is how often Cache.Sweep applies the two above.
	SweepInterval time.Duration
	// APITimeout bounds each API call of a bind (the Binding carrying the plan, the reconcile read).
	APITimeout time.Duration
	// Preemption is which preemption the extender takes part in (--preemption): PreemptionOwn
	// (the default), PreemptionVerb or PreemptionNone.
	Preemption PreemptionMode
	// LeaderLease is "<namespace>/<name>" of its kube-scheduler's leader-election Lease
	// (--leader-election-lease). Set, the extender serves only while Identity's kube-scheduler
	// holds it, and a new term only after the previous leader's binds are over (leader.go).
	// Empty: it serves whenever it is ready.
	LeaderLease string
	// Identity is the hostname of its kube-scheduler (the pod's; kube-scheduler's leader identity is
	// "<hostname>_<uuid>"). Required with LeaderLease.
	Identity string
}

// PreemptionMode is which preemption the extender takes part in for its GPU pods.
type PreemptionMode string

const (
	// PreemptionOwn: kube-scheduler's, through the preempt verb, and the extender's own for the
	// nodes kube-scheduler's dry run cannot see (fragmented GPUs: ownpreempt.go).
	PreemptionOwn PreemptionMode = "own"
	// PreemptionVerb: kube-scheduler's only (the verb adds the victims the GPUs need); no own
	// preemption.
	PreemptionVerb PreemptionMode = "verb"
	// PreemptionNone: no preemption for the extender's GPU pods: the verb answers no node for
	// them (kube-scheduler evicts nobody for them) and there is no own preemption. Other pods
	// keep kube-scheduler's preemption.
	PreemptionNone PreemptionMode = "none"
)

// DefaultConfig returns the defaults of docs/components.md.
func DefaultConfig() Config {
	return Config{
		SchedulerName:  device.SchedulerName,
		Resources:      device.DefaultResourceNames(),
		NodePolicy:     device.Binpack,
		GPUPolicy:      device.Binpack,
		StaleAfter:     60 * time.Second,
		LeaseNamespace: "kube-node-lease",
		ReservationTTL: 60 * time.Second,
		GoneTTL:        600 * time.Second,
		SweepInterval:  15 * time.Second,
		APITimeout:     10 * time.Second,
		Preemption:     PreemptionOwn,
	}
}

// Validate reports the first bad field, naming it and its value.
func (c *Config) Validate() error {
	if c.SchedulerName == "" {
		return fmt.Errorf("scheduler-name is empty")
	}
	if err := c.Resources.Validate(); err != nil {
		return err
	}
	if _, err := device.ParsePolicy("node-policy", string(c.NodePolicy), ""); err != nil || c.NodePolicy == "" {
		return fmt.Errorf("node-policy: %q is not binpack or spread", c.NodePolicy)
	}
	if _, err := device.ParsePolicy("gpu-policy", string(c.GPUPolicy), ""); err != nil || c.GPUPolicy == "" {
		return fmt.Errorf("gpu-policy: %q is not binpack or spread", c.GPUPolicy)
	}
	if c.StaleAfter <= 0 {
		return fmt.Errorf("inventory-stale-after: %v is not positive", c.StaleAfter)
	}
	if c.LeaseNamespace == "" {
		return fmt.Errorf("lease-namespace is empty")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"reservation TTL", c.ReservationTTL}, {"gone TTL", c.GoneTTL}, {"sweep interval", c.SweepInterval}} {
		if d.v <= 0 {
			return fmt.Errorf("%s: %v is not positive", d.name, d.v)
		}
	}
	if c.APITimeout <= 0 {
		return fmt.Errorf("API timeout: %v is not positive", c.APITimeout)
	}
	if c.LeaderLease != "" {
		if _, _, err := parseLeaderLease(c.LeaderLease); err != nil {
			return err
		}
		if c.Identity == "" {
			return fmt.Errorf("leader-election-lease %q needs the identity (hostname) of its kube-scheduler", c.LeaderLease)
		}
	}
	switch c.Preemption {
	case PreemptionOwn, PreemptionVerb, PreemptionNone:
	default:
		return fmt.Errorf("preemption: %q is not none, verb or own", c.Preemption)
	}
	return nil
}
