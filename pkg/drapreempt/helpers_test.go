package drapreempt

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/draapi"
)

// gpuSlice is node's ResourceSlice of n devices gpu-0.. of memMiB each and split sharers, as
// pkg/dra publishes them (pool = node name).
func gpuSlice(node string, n int, memMiB, split int64) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + draapi.DriverName},
		Spec: resourceapi.ResourceSliceSpec{Driver: draapi.DriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}},
	}
	for i := range n {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: "gpu-" + strconv.Itoa(i), AllowMultipleAllocations: ptr.To(true),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				draapi.AttrUUID:        {StringValue: ptr.To("GPU-" + node + "-" + strconv.Itoa(i))},
				draapi.AttrProductName: {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				draapi.CapacityMemory:  {Value: *resource.NewQuantity(memMiB*mib, resource.BinarySI)},
				draapi.CapacityCores:   {Value: *resource.NewQuantity(100, resource.DecimalSI)},
				draapi.CapacitySharers: {Value: *resource.NewQuantity(split, resource.DecimalSI)},
			},
		})
	}
	return s
}

// mkPod is a pod of priority prio, UID "uid-<name>", in namespace ns.
func mkPod(ns, name string, prio int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Priority: ptr.To(prio)},
	}
}

// held is a claim allocated on node's device gpu-<dev> consuming memMiB, reserved by pods.
func held(name, node string, dev int, memMiB int64, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("claim-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: draapi.DriverName, Pool: node, Device: "gpu-" + strconv.Itoa(dev),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
			draapi.CapacityMemory:  *resource.NewQuantity(memMiB*mib, resource.BinarySI),
			draapi.CapacityCores:   *resource.NewQuantity(0, resource.DecimalSI),
			draapi.CapacitySharers: *resource.NewQuantity(1, resource.DecimalSI),
		},
	}}}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	return c
}

// need is a pending claim as the webhook writes it: count GPUs of memMiB each (0: whole GPU).
func need(name string, count int64, memMiB int64, selectors ...string) *resourceapi.ResourceClaim {
	e := &resourceapi.ExactDeviceRequest{DeviceClassName: draapi.DriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	if memMiB > 0 {
		e.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			draapi.CapacityMemory: *resource.NewQuantity(memMiB*mib, resource.BinarySI)}}
	}
	for _, s := range selectors {
		e.Selectors = append(e.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("claim-" + name)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: e}}}},
	}
}

// podsByUID indexes pods by UID.
func podsByUID(ps ...*corev1.Pod) map[types.UID]*corev1.Pod {
	m := map[types.UID]*corev1.Pod{}
	for _, p := range ps {
		m[p.UID] = p
	}
	return m
}
