package schedplugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/hami-go/hami-go/pkg/device"
)

// Reserve books a GPU pod of ours on the node the scheduler chose (extender
// Scheduler.ReserveOn), so that the next scheduling cycle sees its GPUs taken while this pod's
// binding cycle runs. Unschedulable with the extender's reason when it cannot (the GPUs were
// taken meanwhile, the node lost its inventory, the pod is gone or already being bound): the
// framework then calls Unreserve and retries the pod. Other pods: Success, nothing booked.
func (p *Plugin) Reserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	s := readFilter(state)
	if s == nil {
		return nil
	}
	if err := p.sched.ReserveOn(pod, s.req, nodeName); err != nil {
		klog.FromContext(ctx).V(2).Info("hami-go could not reserve", "pod", klog.KObj(pod), "node", nodeName, "reason", err.Error())
		return fwk.NewStatus(fwk.Unschedulable, err.Error())
	}
	p.sched.NoteScheduled(pod)
	return nil
}

// Unreserve drops the pod's reservation on nodeName (extender Cache.Unreserve): Reserve's, or
// one a failed bind left. A bind in progress, a bound pod and a bind whose outcome is unknown
// (it may be committed) keep their booking. The pod is not marked gone. Idempotent.
func (p *Plugin) Unreserve(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) {
	if readFilter(state) == nil {
		return
	}
	if p.cache.Unreserve(device.RefOf(pod), nodeName) {
		klog.FromContext(ctx).V(4).Info("hami-go unreserved", "pod", klog.KObj(pod), "node", nodeName)
	}
}

// Bind binds a GPU pod of ours with the extender's one write (extender.Extender.Bind: a Binding
// carrying the planned allocation as device.AnnoPlanned, which the API server sets with
// spec.nodeName in one update; a refusal records a Warning Event). An Error status with the
// extender's reason when it fails (the framework calls Unreserve and retries the pod). Skip for
// every other pod, so that DefaultBinder binds it.
func (p *Plugin) Bind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	if readFilter(state) == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	if err := p.ext.Bind(ctx, device.RefOf(pod), nodeName); err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}
