// Package podtest builds the test pods the extender's and the kubectl plugin's unit tests share
// (in the style of kube-scheduler's st.MakePod, without its chaining): a pending pod of hami-go's
// scheduler whose containers ask for GPU slices under the default resource names.
package podtest

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hami-go/hami-go/pkg/device"
)

// Ctr is a test container: its GPU limits under device.DefaultResourceNames: Count GPUs, Mem
// (a memory quantity string, MiB when bare; "" = none), Pct (memory percent, 0 = none) and
// Cores (percent, 0 = none). Kind "" or KindApp is an app container; NoGPU leaves the limits
// unset.
type Ctr struct {
	Name  string
	Kind  device.ContainerKind
	Count int64
	Mem   string
	Pct   int64
	Cores int64
	NoGPU bool
}

// GPU is an app container with count GPUs, mem and cores.
func GPU(name string, count int64, mem string, cores int64) Ctr {
	return Ctr{Name: name, Kind: device.KindApp, Count: count, Mem: mem, Cores: cores}
}

// Pending returns the Pending pod ns/name (UID "uid-<ns>-<name>", empty annotations, scheduler
// device.SchedulerName) with ctrs as containers (image "busybox").
func Pending(ns, name string, ctrs ...Ctr) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Annotations: map[string]string{}},
		Spec:       corev1.PodSpec{SchedulerName: device.SchedulerName},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	names := device.DefaultResourceNames()
	for _, c := range ctrs {
		k := corev1.Container{Name: c.Name, Image: "busybox"}
		if !c.NoGPU {
			l := corev1.ResourceList{}
			if c.Count > 0 {
				l[corev1.ResourceName(names.Count)] = *resource.NewQuantity(c.Count, resource.DecimalSI)
			}
			if c.Mem != "" {
				l[corev1.ResourceName(names.Memory)] = resource.MustParse(c.Mem)
			}
			if c.Pct > 0 {
				l[corev1.ResourceName(names.MemoryPercent)] = *resource.NewQuantity(c.Pct, resource.DecimalSI)
			}
			if c.Cores > 0 {
				l[corev1.ResourceName(names.Cores)] = *resource.NewQuantity(c.Cores, resource.DecimalSI)
			}
			k.Resources.Limits = l
		}
		AddContainer(p, c.Kind, k)
	}
	return p
}

// AddContainer appends k to p as kind: KindInit an init container, KindSidecar an init
// container with restartPolicy Always (a native sidecar, Kubernetes KEP-753), otherwise an app
// container.
func AddContainer(p *corev1.Pod, kind device.ContainerKind, k corev1.Container) {
	switch kind {
	case device.KindInit:
		p.Spec.InitContainers = append(p.Spec.InitContainers, k)
	case device.KindSidecar:
		always := corev1.ContainerRestartPolicyAlways
		k.RestartPolicy = &always
		p.Spec.InitContainers = append(p.Spec.InitContainers, k)
	default:
		p.Spec.Containers = append(p.Spec.Containers, k)
	}
}
