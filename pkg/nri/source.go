package nri

// This file is what the plugin asks a node agent (Source) about a container, and the plan and
// grant it answers with.

import "context"

// Container names the container the runtime is creating, as NRI delivers it.
type Container struct {
	// PodUID, PodNamespace and PodName are the pod's (Kubernetes UID, namespace, name).
	PodUID, PodNamespace, PodName string
	// Name is the container's name in the pod spec.
	Name string
	// ID is the runtime's container ID ("" = unknown): what /proc/<pid>/cgroup names, for
	// mapping GPU processes to containers (per-slice memory use).
	ID string
	// CDIDevices are the fully qualified CDI device names the kubelet asked for
	// ("vendor/class=name"), e.g. a DRA claim's.
	CDIDevices []string
	// Creating is true at CreateContainer, where the container has not started yet (a Source
	// may prepare host state for it, e.g. a fresh HAMi-core cache file: case C56), and false
	// for a running container Synchronize checks.
	Creating bool
}

func (c Container) String() string { return c.PodNamespace + "/" + c.PodName + "/" + c.Name }

// Plan is what the NRI plugin sets in a container whose plan the device plugin left to it (the
// pending answer: docs/design.md "Applying a pod's plan").
type Plan struct {
	// Env is the env the plan gives the container (pkg/gpuenv); empty: the container has no plan.
	Env map[string]string
	// CDIDevices are the fully qualified CDI device names the plugin adds ("vendor/class=name";
	// the device plugin's cdi strategy).
	CDIDevices []string
	// Mounts are the bind mounts the plugin adds: the enforcement's library and its preload file
	// (read-only), the mask of HAMi-core's /overrideEnv, the container's own directory for
	// HAMi-core's shared cache (read-write; the Source created it on the host). They are decided
	// here, at the container's creation, from what the host has then: a mount the kubelet cached
	// from Allocate would outlive the library it names (issue 36 item 4). A mount replaces one
	// the container already has at the same destination (NRI v0.12.3
	// pkg/runtime-tools/generate AdjustMounts removes it first).
	Mounts []Mount
	// DriverCapabilities are the NVIDIA driver capabilities the container's
	// NVIDIA_DRIVER_CAPABILITIES must include (gpuenv.Edits.DriverCapabilities; "" = none):
	// the plugin adds what it lacks (DriverCapabilitiesChange).
	DriverCapabilities string
	// Answer is the protected env the device plugin's pending answer sets beside the empty
	// MarkerEnv (NVIDIA_VISIBLE_DEVICES=void under the cdi strategy, so that a container created
	// without its plan reaches no GPU through the NVIDIA runtime). A name counts as the answer's
	// only where the container's env holds that exact entry: a kubelet's checkpointed answer from
	// an older device plugin lacks it. Env should set each such name too (the plan's value wins:
	// Decide's adjustment replaces the answer's).
	Answer map[string]string
}

// Mount is a bind mount of host path Source at container path Destination, read-write unless
// ReadOnly.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// options are m's OCI mount options: a recursive bind, "ro" or "rw".
func (m Mount) options() []string {
	if m.ReadOnly {
		return []string{"rbind", "ro"}
	}
	return []string{"rbind", "rw"}
}

// Granted is what hami-go gave a container whose env it checks.
type Granted struct {
	// GPU is true when hami-go gave the container GPUs.
	GPU bool
	// Env is the env hami-go's answer set in the container (the DRA claims' CDI specs; a running
	// container's applied plan); nil when GPU is false.
	Env map[string]string
	// DriverCapabilities are as Plan's: what the container's NVIDIA_DRIVER_CAPABILITIES must
	// include ("" = none).
	DriverCapabilities string
}

// Source is what a node agent knows of the GPUs it gives containers, asked by the NRI plugin's
// two duties. An error means the container has (or may have) GPUs and what hami-go gives it
// cannot be known now; the plugin then refuses the container (fail closed) and the kubelet
// retries it.
type Source interface {
	// Plan is asked for a container whose env carries the device plugin's pending answer (the
	// plugin decides that, answerPending): the container claims its pod's own plan, and the
	// plugin applies it (device-plugin mode). A Source that never gives the pending answer (the
	// DRA driver) returns an error.
	Plan(ctx context.Context, c Container) (Plan, error)
	// Granted is asked for any other container whose env holds a protected name: what hami-go
	// gave it, which the plugin pins the env to (case C37, both modes).
	Granted(ctx context.Context, c Container) (Granted, error)
}
