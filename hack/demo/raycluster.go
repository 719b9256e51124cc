package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// rayClusterGVR is KubeRay's RayCluster resource (ray.io/v1).
var rayClusterGVR = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}

// rayImage and rayVersion follow KubeRay v1.5's quick-start sample (config/samples/ray-cluster.sample.yaml).
// The local cluster imports its workload image (hack/workload: a `ray` stand-in) under this name.
const (
	rayImage   = "rayproject/ray:2.46.0"
	rayVersion = "2.46.0"
)

// workerGPU is what each worker of a group asks for: a whole GPU (memMiB = 0) or a slice.
type workerGPU struct {
	memMiB int64
	cores  int
}

// newRayCluster builds a RayCluster laid out like KubeRay's quick start: a head without GPU and
// one worker group of `replicas` workers, each asking one GPU (or one slice of one). CPU and
// memory are smaller than the sample's so that the demo fits a 2-core node.
func newRayCluster(name string, replicas int64, gpu workerGPU) *unstructured.Unstructured {
	workerLimits := map[string]any{"cpu": "1", "memory": "512Mi", "nvidia.com/gpu": "1"}
	if gpu.memMiB > 0 {
		workerLimits["nvidia.com/gpumem"] = fmt.Sprint(gpu.memMiB)
	}
	if gpu.cores > 0 {
		workerLimits["nvidia.com/gpucores"] = fmt.Sprint(gpu.cores)
	}
	container := func(name string, limits map[string]any, ports []any) map[string]any {
		return map[string]any{
			"name":            name,
			"image":           rayImage,
			"imagePullPolicy": "IfNotPresent",
			"resources": map[string]any{
				"limits":   limits,
				"requests": map[string]any{"cpu": "100m", "memory": "128Mi"},
			},
			"ports": ports,
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1",
		"kind":       "RayCluster",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"rayVersion": rayVersion,
			"headGroupSpec": map[string]any{
				"rayStartParams": map[string]any{},
				"template": map[string]any{"spec": map[string]any{"containers": []any{
					container("ray-head", map[string]any{"cpu": "1", "memory": "512Mi"}, []any{
						map[string]any{"containerPort": int64(6379), "name": "gcs-server"},
						map[string]any{"containerPort": int64(8265), "name": "dashboard"},
						map[string]any{"containerPort": int64(10001), "name": "client"},
					}),
				}}},
			},
			"workerGroupSpecs": []any{map[string]any{
				"groupName":      "gpu-group",
				"replicas":       replicas,
				"minReplicas":    int64(0),
				"maxReplicas":    int64(8),
				"rayStartParams": map[string]any{},
				"template": map[string]any{"spec": map[string]any{"containers": []any{
					container("ray-worker", workerLimits, nil),
				}}},
			}},
		},
	}}
}
