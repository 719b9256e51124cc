package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// chartNamespace is where `hack/cluster/up.sh` installs the chart.
const chartNamespace = "hami-go-system"

// agent is the node agent of the demo's mode as its pod runs it: its --backend and the port of its
// container port "metrics" (the chart's devicePlugin.metricsPort or draDriver.metricsPort).
type agent struct {
	name        string // "device plugin" or "DRA driver"
	backend     string // "nvml" or "fake"
	metricsPort int32
}

// nodeAgent reads the running agent of d.mode on d.node from its pod.
func (d *demo) nodeAgent(ctx context.Context) (agent, error) {
	a := agent{name: "device plugin", backend: "fake"}
	component := "device-plugin"
	if d.mode == modeDRA {
		a.name, component = "DRA driver", "dra-driver"
	}
	pods, err := d.kube.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=" + component, FieldSelector: "spec.nodeName=" + d.node})
	if err != nil {
		return a, fmt.Errorf("list the %s's pods: %w", a.name, err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			for _, arg := range c.Args {
				if b, ok := strings.CutPrefix(arg, "--backend="); ok {
					a.backend = b
				}
			}
			for _, port := range c.Ports {
				if port.Name == "metrics" {
					a.metricsPort = port.ContainerPort
				}
			}
		}
		if a.metricsPort != 0 {
			return a, nil
		}
	}
	return a, fmt.Errorf("no running %s pod with a metrics port on node %s in %s", a.name, d.node, chartNamespace)
}

// driverLine says what the node's GPUs are behind the agent: with the nvml backend on the local
// cluster, hack/simgpu's simulated driver under <state>/driver (its version from the library's
// file name) and NVIDIA's Container Toolkit's CDI spec; with the fake backend, go-nvml's mock
// servers inside the agent.
func driverLine(state string, a agent) string {
	if a.backend != "nvml" {
		return fmt.Sprintf("Driver: none; the %s's fake backend (go-nvml mock servers, no CUDA)", a.name)
	}
	root := filepath.Join(state, "driver")
	libs, _ := filepath.Glob(filepath.Join(root, "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*"))
	if len(libs) == 0 {
		return fmt.Sprintf("Driver: NVIDIA driver on the node (the %s's nvml backend)", a.name)
	}
	version := strings.TrimPrefix(filepath.Base(libs[0]), "libnvidia-ml.so.")
	line := fmt.Sprintf("Driver: simulated NVIDIA driver %s (hack/simgpu, docs/simgpu.md) under %s; the %s's nvml backend over it", version, root, a.name)
	if _, err := os.Stat("/var/run/cdi/nvidia.yaml"); err == nil {
		line += "; NVIDIA Container Toolkit's CDI spec /var/run/cdi/nvidia.yaml, containerd's default runtime nvidia"
	}
	return line
}
