// Package webhook is hami-go's mutating admission webhook (admission.k8s.io/v1) on
// controller-runtime's webhook server: /mutate-pods defaults, validates and routes GPU pods and
// sets `ray start --num-gpus` in KubeRay pods; /mutate-rayclusters writes the same GPU figures
// into RayCluster group specs for the Ray autoscaler (rules in pkg/ray).
package webhook

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/ray"
)

// PrivilegedPolicy says what happens to a GPU pod with a privileged container (case C25).
type PrivilegedPolicy string

const (
	// PrivilegedDeny refuses the pod, naming the container (default). A privileged container
	// sees every GPU of the node, outside any slice.
	PrivilegedDeny PrivilegedPolicy = "deny"
	// PrivilegedIgnore admits the pod untouched: no patch at all (no scheduler, no defaults);
	// the pod is then not hami-go's and the device plugin refuses it a slice.
	PrivilegedIgnore PrivilegedPolicy = "ignore"
)

// AnnotationPolicy says what happens to a pod that writes a slice resource name as an
// annotation (case C39).
type AnnotationPolicy string

const (
	// AnnotationDeny refuses the pod, naming the annotation and where it belongs (default).
	AnnotationDeny AnnotationPolicy = "deny"
	// AnnotationWarn admits the pod with an admission warning saying the same.
	AnnotationWarn AnnotationPolicy = "warn"
)

// Mode is the node-side mode the webhook serves (the chart's `mode`, flag --mode).
type Mode string

const (
	// ModeDevicePlugin keeps GPU limits as extended resources for hami-go's device plugin and
	// routes GPU pods to the scheduler extender (default).
	ModeDevicePlugin Mode = "deviceplugin"
	// ModeDRA turns GPU limits into ResourceClaims for the DeviceClass gpu.hami-go.io and
	// removes them, so stock kube-scheduler and the DRA driver serve them (docs/dra.md, "Pod
	// API in DRA mode").
	ModeDRA Mode = "dra"
)

// DefaultScheduler is the name the API server gives a pod that names no scheduler.
const DefaultScheduler = "default-scheduler"

// Config is what the admission handlers need.
type Config struct {
	// Names are the slice resource names (device.ResourceNames; the --resource-* flags,
	// registered by cliflags.AddResourceNames in cmd/webhook/options.go).
	Names device.ResourceNames
	// SchedulerName is set on GPU pods that use the default scheduler (case C27).
	SchedulerName string
	// Privileged is the rule for GPU pods with privileged containers (case C25).
	Privileged PrivilegedPolicy
	// ResourceAnnotations is the rule for slice resource names written as pod annotations
	// (case C39).
	ResourceAnnotations AnnotationPolicy
	// Namespace is the webhook's own namespace; its pods and RayClusters are admitted untouched.
	// Empty: none.
	Namespace string
	// Ray says how GPUs are counted and shown to Ray (pkg/ray).
	Ray ray.Config
	// Mode is deviceplugin (default) or dra.
	Mode Mode
	// DRASchedulerName, in DRA mode, is set on GPU pods that use the default scheduler: a
	// profile of the cluster's kube-scheduler that packs GPU pods onto the fullest node by
	// hami-go.io/gpu-memory (docs/dra.md, "Packing under concurrency"). Empty (default): the pod
	// keeps its scheduler. Only for ModeDRA.
	DRASchedulerName string
	// GPUMemoryNodeAffinity, in device-plugin mode, adds to a GPU pod asking MiB per GPU a
	// required node affinity on the GFD label nvidia.com/gpu.memory (gpuMemoryAffinity), so that
	// Cluster Autoscaler and Karpenter pick a node group whose cards can hold it. Only for
	// ModeDevicePlugin (DRA-mode nodes carry no GFD labels of hami-go's).
	GPUMemoryNodeAffinity bool
}

// DefaultConfig returns the defaults of docs/components.md.
func DefaultConfig() Config {
	n := device.DefaultResourceNames()
	return Config{
		Names:               n,
		SchedulerName:       device.SchedulerName,
		Privileged:          PrivilegedDeny,
		ResourceAnnotations: AnnotationDeny,
		Ray:                 ray.DefaultConfig(n.Count),
		Mode:                ModeDevicePlugin,
	}
}

// Validate reports an invalid field by name and value.
func (c Config) Validate() error {
	if err := c.Names.Validate(); err != nil {
		return err
	}
	if c.SchedulerName == "" {
		return fmt.Errorf("scheduler name is empty")
	}
	if c.Privileged != PrivilegedDeny && c.Privileged != PrivilegedIgnore {
		return fmt.Errorf("privileged: %q is not deny or ignore", c.Privileged)
	}
	if c.ResourceAnnotations != AnnotationDeny && c.ResourceAnnotations != AnnotationWarn {
		return fmt.Errorf("resource annotations: %q is not deny or warn", c.ResourceAnnotations)
	}
	if c.Mode != ModeDevicePlugin && c.Mode != ModeDRA {
		return fmt.Errorf("mode: %q is not deviceplugin or dra", c.Mode)
	}
	if c.GPUMemoryNodeAffinity && c.Mode != ModeDevicePlugin {
		return fmt.Errorf("gpu memory node affinity: true with mode %q; it is for mode deviceplugin (in mode dra the nodes carry no nvidia.com/gpu.memory label of hami-go's)", c.Mode)
	}
	if s := c.DRASchedulerName; s != "" {
		if c.Mode != ModeDRA {
			return fmt.Errorf("dra scheduler name: %q is set with mode %q; it is for mode dra (mode deviceplugin sets the scheduler name)", s, c.Mode)
		}
		if errs := validation.IsDNS1123Subdomain(s); len(errs) > 0 {
			return fmt.Errorf("dra scheduler name: %q is not a scheduler name: %s", s, strings.Join(errs, "; "))
		}
	}
	return c.Ray.Validate(c.Names)
}
