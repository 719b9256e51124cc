// Package ray holds what hami-go tells Ray about the GPUs of a KubeRay pod: how many GPUs a
// Ray container has (`ray start --num-gpus`, an integer), the GPU memory it holds as a Ray
// custom resource, and the GPU model as a Ray node label. It rewrites `ray start` command lines
// (RewriteStartLine) and RayCluster group specs (MutateCluster). It is pure: no Kubernetes
// client, no I/O, no package-level mutable state.
package ray

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hami-go/hami-go/pkg/device"
)

// KubeRay's conventions (github.com/ray-project/kuberay/ray-operator v1.5: utils.RayNodeTypeLabelKey,
// utils.RayContainerIndex, utils.KUBERAY_GEN_RAY_START_CMD).
const (
	// LabelNodeType is set by KubeRay on every Ray pod: "head" or "worker".
	LabelNodeType = "ray.io/node-type"
	// ContainerIndex is the index of the Ray container in a KubeRay pod (and group template).
	ContainerIndex = 0
	// EnvGeneratedStartCmd holds the `ray start` line KubeRay generated for the container.
	EnvGeneratedStartCmd = "KUBERAY_GEN_RAY_START_CMD"
)

// Config says which resources count as GPUs for Ray and how the slice is exposed to Ray.
type Config struct {
	// GPUResources lists the container resource names whose limits are a GPU count, in priority
	// order (case C32). An entry ending in "*" matches every name with that prefix
	// ("nvidia.com/mig-*"). Memory and percentage resources must never be listed.
	GPUResources []string
	// MemoryResource is the Ray custom resource that carries the GPU memory of the container's
	// slices, integer MiB (default "gpu_memory_mib"). Empty: not exposed.
	MemoryResource string
	// AcceleratorLabel is the Ray node label that carries the GPU model (default
	// "hami-go.io/accelerator-type"). Empty: not exposed (Ray older than 2.49 has no string --labels).
	// It must not start with "ray.io/": Ray reserves that prefix for the labels it sets itself and
	// refuses to start a node given one (validate_node_labels in python/ray/_private/utils.py).
	AcceleratorLabel string
}

// DefaultConfig returns the defaults for the given count resource name: GPUs are counted from
// the count resource, then from NVIDIA's MIG resources.
func DefaultConfig(countResource string) Config {
	return Config{
		GPUResources:     []string{countResource, "nvidia.com/mig-*"},
		MemoryResource:   "gpu_memory_mib",
		AcceleratorLabel: "hami-go.io/accelerator-type",
	}
}

// Validate reports an empty GPU resource list or entry, a listed slice memory/percentage/cores
// resource (memory is never a GPU count, C32), and a memory resource name Ray would reject.
func (c Config) Validate(names device.ResourceNames) error {
	if len(c.GPUResources) == 0 {
		return fmt.Errorf("ray GPU resources: the list is empty")
	}
	for _, r := range c.GPUResources {
		if r == "" || r == "*" {
			return fmt.Errorf("ray GPU resources: %q is not a resource name or prefix*", r)
		}
		for _, bad := range []string{names.Memory, names.MemoryPercent, names.Cores} {
			if matches(r, bad) {
				return fmt.Errorf("ray GPU resources: %q matches %s, which is not a GPU count (case C32)", r, bad)
			}
		}
	}
	if strings.ContainsAny(c.MemoryResource, "\"'\\ ${}`") {
		return fmt.Errorf("ray memory resource: %q has characters a Ray resource name cannot have", c.MemoryResource)
	}
	if c.AcceleratorLabel != "" && !validLabelKey(c.AcceleratorLabel) {
		return fmt.Errorf("ray accelerator label: %q is not a label key (prefix/name)", c.AcceleratorLabel)
	}
	return nil
}

func matches(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return pattern == name
}

// GPUCount returns the number of GPUs a container has for Ray, read from its limits (requests
// where a limit is missing) under c.GPUResources (case C32): the first entry, in list order,
// under which the container asks for a non-zero amount decides; within a "prefix*" entry the
// first matching name in lexical order decides (KubeRay's own order), so the result never
// depends on map order. countDefault, when > 0, stands in for a missing countResource (the
// webhook's default of 1 slice where only memory or cores are given). 0 means no GPU (C33).
// field prefixes errors, e.g. "spec.containers[ray-worker]"; a value that is not a whole,
// non-negative number is an error naming field and value.
func (c Config) GPUCount(field string, res corev1.ResourceRequirements, countResource string, countDefault int) (int, error) {
	values := map[string]resource.Quantity{}
	where := map[string]string{}
	for n, q := range res.Requests {
		values[string(n)], where[string(n)] = q, "requests"
	}
	for n, q := range res.Limits {
		values[string(n)], where[string(n)] = q, "limits"
	}
	if _, ok := values[countResource]; !ok && countDefault > 0 {
		values[countResource], where[countResource] = *resource.NewQuantity(int64(countDefault), resource.DecimalSI), "limits"
	}
	names := make([]string, 0, len(values))
	for n := range values {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, entry := range c.GPUResources {
		for _, n := range names {
			if !matches(entry, n) {
				continue
			}
			q := values[n]
			if q.IsZero() {
				continue
			}
			v, err := device.ParseCount(fmt.Sprintf("%s.resources.%s[%s]", field, where[n], n), q)
			if err != nil {
				return 0, err
			}
			return v, nil
		}
	}
	return 0, nil
}

// validLabelKey reports whether k is a Kubernetes-style label key ([prefix/]name), the syntax
// Ray's label_utils.validate_label_key accepts.
func validLabelKey(k string) bool {
	prefix, name, found := strings.Cut(k, "/")
	if !found {
		name, prefix = prefix, ""
	}
	if strings.Contains(name, "/") || !validLabelValue(name) || name == "" {
		return false
	}
	if found {
		if prefix == "" || len(prefix) > 253 {
			return false
		}
		for _, p := range strings.Split(prefix, ".") {
			if p == "" || !validLabelValue(p) || strings.ContainsAny(p, "_") {
				return false
			}
		}
	}
	return true
}

// validLabelValue: empty, or at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric.
func validLabelValue(v string) bool {
	if v == "" {
		return true
	}
	if len(v) > 63 || !alnum(v[0]) || !alnum(v[len(v)-1]) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !alnum(v[i]) && v[i] != '-' && v[i] != '_' && v[i] != '.' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
