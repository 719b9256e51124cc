package deviceplugin

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/nri"
)

// ReasonPlanNotApplied is the reason of the Warning Event on a pod one of whose GPU containers
// was found running without its plan (created while the node agent's NRI plugin was away, in
// the moment between PreStartContainer and the runtime's call), just before the pod is deleted.
const ReasonPlanNotApplied = "GPUPlanNotApplied"

// unplannedStopper stops the pods of containers that run without their GPU plan
// (nri.Plugin.OnUnplanned): such a container has no GPU limit, so it may not keep running. Its
// pod is deleted at once (grace period 0, with its UID as precondition, so a pod re-created
// under the same name is left alone) after a Warning Event says why, and its controller makes a new pod, whose
// containers get their plan at creation. A pod the plan path never placed (no plan in the
// ledger) is left alone: its container is refused at creation by the NRI plugin when it asks
// for GPUs.
type unplannedStopper struct {
	p        *Plugin
	client   kubernetes.Interface
	recorder record.EventRecorder
}

// stop implements the nri.Plugin.OnUnplanned handler.
func (s unplannedStopper) stop(ctx context.Context, c nri.Container) {
	uid := types.UID(c.PodUID)
	if _, _, planned := s.p.ledger.ContainerClaim(uid, c.Name); !planned {
		klog.InfoS("A running container without its plan belongs to a pod hami-go planned no GPUs for; left alone",
			"pod", klog.KRef(c.PodNamespace, c.PodName), "container", c.Name)
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: c.PodNamespace, Name: c.PodName, UID: uid}
	msg := fmt.Sprintf("container %s was created while hami-go's NRI plugin was away and runs without its GPU plan (no GPU limit); deleting the pod at once (grace period 0) so that its controller creates one that gets its plan", c.Name)
	s.recorder.Event(ref, corev1.EventTypeWarning, ReasonPlanNotApplied, msg)
	// Grace period 0 (case C52): the container runs without its limit until it is gone; a
	// graceful stop would leave it running for the pod's terminationGracePeriodSeconds.
	var now int64
	err := s.client.CoreV1().Pods(c.PodNamespace).Delete(ctx, c.PodName, metav1.DeleteOptions{GracePeriodSeconds: &now, Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		klog.InfoS("Deleted a pod whose container ran without its GPU plan", "pod", klog.KRef(c.PodNamespace, c.PodName), "podUID", uid, "container", c.Name)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		klog.V(2).InfoS("The pod of a container without its plan is gone already", "pod", klog.KRef(c.PodNamespace, c.PodName), "podUID", uid)
	default:
		klog.ErrorS(err, "Deleting a pod whose container runs without its GPU plan failed", "pod", klog.KRef(c.PodNamespace, c.PodName), "podUID", uid, "container", c.Name)
	}
}
