// Package device is hami-go's vocabulary: physical GPUs and a node's Inventory, a pod's
// Request for GPU slices, the Allocation the scheduler extender plans and the device plugin
// claims, the one quantity rule, the versioned JSON wire formats of those facts, and the
// Allocate-matching vocabulary (CallKey, Signature) shared by the extender and the device plugin.
//
// The package is pure: it imports Kubernetes API types (k8s.io/api, k8s.io/apimachinery) but no
// client, no gRPC and no HTTP, and it keeps no package-level mutable state.
//
// Units: memory is always MiB (int64); compute ("cores") is always percent of one GPU (0..100).
package device
