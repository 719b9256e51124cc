// Package draapi holds the names hami-go's DRA driver publishes (driver, capacities,
// attributes, taint key): pkg/dra writes them, and readers such as the kubectl plugin
// (pkg/gpuview) import them from here without pulling in the kubelet plugin and gRPC.
// Constants only.
package draapi

import resourceapi "k8s.io/api/resource/v1"

// DriverName is the DRA driver name, the DeviceClass name and the CDI vendor of claim specs.
const DriverName = "gpu.hami-go.io"

// Capacity names of every published GPU (the same names as HAMi's DRA driver, so a claim
// written for it ports by changing the DeviceClass name).
const (
	// CapacityMemory is the GPU memory, bytes (whole MiB).
	CapacityMemory resourceapi.QualifiedName = "memory"
	// CapacityCores is compute, percent of the GPU (as nvidia.com/gpucores).
	CapacityCores resourceapi.QualifiedName = "cores"
	// CapacitySharers is the number of claims that may share the GPU (the split count).
	CapacitySharers resourceapi.QualifiedName = "sharers"
)

// Attribute names (unqualified names belong to the driver's domain, gpu.hami-go.io).
const (
	AttrUUID              resourceapi.QualifiedName = "uuid"
	AttrIndex             resourceapi.QualifiedName = "index"
	AttrProductName       resourceapi.QualifiedName = "productName"
	AttrModel             resourceapi.QualifiedName = "model"
	AttrMemoryMiB         resourceapi.QualifiedName = "memoryMiB"
	AttrComputeCapability resourceapi.QualifiedName = "computeCapability"
	AttrArchitecture      resourceapi.QualifiedName = "architecture"
	AttrDriverVersion     resourceapi.QualifiedName = "driverVersion"
	AttrCUDAVersion       resourceapi.QualifiedName = "cudaDriverVersion"
)

// AttrEnforcement is the string attribute naming the node's slice enforcement mode
// (device.Enforcement.Mode: hami-core, mps, none), so a claim can select enforced GPUs with CEL.
const AttrEnforcement resourceapi.QualifiedName = "enforcement"

// TaintEnforcementMissing is the key of the NoSchedule taint on every GPU of a node whose
// enforcement is missing (device.Enforcement.Ready false); its value is the mode.
const TaintEnforcementMissing = DriverName + "/enforcement-missing"

// TaintUnhealthy is the key of the NoSchedule taint on a GPU after a fatal XID; its value is
// "xid-<n>" of the latest XID.
const TaintUnhealthy = DriverName + "/unhealthy"
