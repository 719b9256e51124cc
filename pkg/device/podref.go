package device

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodRef names one pod exactly: namespace, name and UID (case C12). The extender books, and the
// device plugin claims, by it: a release or a claim for one reference never touches another,
// however similar the names, nor a pod re-created under the same name (another UID, case C34).
type PodRef struct {
	Namespace string
	Name      string
	UID       types.UID
}

// RefOf returns p's reference.
func RefOf(p *corev1.Pod) PodRef {
	return PodRef{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}

// String returns "namespace/name", the form of klog.KRef and of the kubelet's PodResources API,
// which names pods without their UID.
func (r PodRef) String() string { return r.Namespace + "/" + r.Name }

// Exact returns "namespace/name (uid)": String with the UID, where two pods of one name must be
// told apart (a pod deleted and re-created under its name).
func (r PodRef) Exact() string { return r.String() + " (" + string(r.UID) + ")" }

// PodFinished reports a pod in phase Succeeded or Failed: it will never run again (the phase
// includes the kubelet's admission rejection UnexpectedAdmissionError, case C13). The extender
// releases a pod's slots then, or when the pod is gone; a pod that is only terminating
// (deletionTimestamp set) still holds them.
func PodFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
