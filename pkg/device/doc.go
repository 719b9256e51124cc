// Package device is hami-go's vocabulary: physical GPUs and a node's Inventory, a pod's
// Request for GPU slices, the Allocation the scheduler extender plans and the node agents claim
// (and its check against the request), the one quantity rule, the versioned JSON wire formats of
// those facts, and the names and rules the components share: resource and annotation names, the
// protected env names (case C37), a node agent's enforcement and liveness, exact pod identity
// (PodRef, case C12), the backend interface the node agents discover GPUs through, and the one
// home of the node agents' shared values: backend names, device-list strategies, enforcement
// modes, and the split-count and memory-scaling bounds (agentmodes.go, enforcement.go, gpu.go).
//
// The package is pure: it imports Kubernetes API types (k8s.io/api, k8s.io/apimachinery) but no
// client, no gRPC and no HTTP, and it keeps no package-level mutable state.
//
// Units: memory is always MiB (int64); compute ("cores") is always percent of one GPU (0..100).
package device
