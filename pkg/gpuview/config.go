// Package gpuview builds what `kubectl hami-go` shows: per node and GPU, what is booked and by
// whom, and why a GPU pod does not fit. It reads only API objects (Nodes, Pods, Leases, Events),
// decodes hami-go's annotations with pkg/device's one decoder and charges allocations with
// pkg/allocator's rule (allocator.ChargeOf, allocator.Fit), so its figures and reasons are the
// scheduler extender's. Building a view is pure (no client, an injected time); load.go is the
// small part that lists the objects.
//
// Sources: the device-plugin mode (inventory annotation on the Node, allocation annotations on
// Pods, per-node Lease; cluster.go) and the DRA mode (ResourceSlices of driver gpu.hami-go.io,
// ResourceClaims' allocation results with consumed capacity; dra.go) fill the same
// Node/GPU/Slice rows, told apart by Node.Mode. Explain (why.go) reasons in the device-plugin
// mode only.
package gpuview

import (
	"fmt"
	"time"

	"github.com/hami-go/hami-go/pkg/device"
)

// Config is what the view needs to read the cluster as the extender does. cmd/kubectl-hami_go
// fills it from flags that mirror the extender's (docs/components.md).
type Config struct {
	// Resources are the extended-resource names pods use (the extender's --resource-*).
	Resources device.ResourceNames
	// SchedulerName is the kube-scheduler profile whose pods the extender places (--scheduler-name).
	SchedulerName string
	// StaleAfter is the Lease age after which a node is stale (the extender's --inventory-stale-after).
	StaleAfter time.Duration
	// LeaseNamespace holds the device plugins' Leases hami-go-<node> (--lease-namespace).
	LeaseNamespace string
}

// DefaultConfig returns the extender's defaults (docs/components.md).
func DefaultConfig() Config {
	return Config{
		Resources:      device.DefaultResourceNames(),
		SchedulerName:  device.SchedulerName,
		StaleAfter:     60 * time.Second,
		LeaseNamespace: "kube-node-lease",
	}
}

// Validate reports the first bad field, naming it and its value.
func (c *Config) Validate() error {
	if err := c.Resources.Validate(); err != nil {
		return err
	}
	if c.SchedulerName == "" {
		return fmt.Errorf("scheduler-name is empty")
	}
	if c.StaleAfter <= 0 {
		return fmt.Errorf("inventory-stale-after: %v is not positive", c.StaleAfter)
	}
	if c.LeaseNamespace == "" {
		return fmt.Errorf("lease-namespace is empty")
	}
	return nil
}
