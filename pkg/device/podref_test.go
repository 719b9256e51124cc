package device

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// One pod reference for the extender and the device plugin (case C12): String is what
// PodResources and klog.KRef name, Exact tells a re-created pod from the old one (C34).
func TestPodRef(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1"}}
	r := RefOf(p)
	if r != (PodRef{Namespace: "ns", Name: "p", UID: "u-1"}) || r.String() != "ns/p" || r.Exact() != "ns/p (u-1)" {
		t.Fatalf("RefOf = %#v, String %q, Exact %q", r, r.String(), r.Exact())
	}
}

// case C13: Succeeded and Failed pods are finished; a terminating or running one is not.
func TestPodFinished(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name  string
		phase corev1.PodPhase
		del   *metav1.Time
		want  bool
	}{
		{"pending", corev1.PodPending, nil, false},
		{"running", corev1.PodRunning, nil, false},
		{"terminating", corev1.PodRunning, &now, false},
		{"succeeded", corev1.PodSucceeded, nil, true},
		{"failed", corev1.PodFailed, &now, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: tc.del}, Status: corev1.PodStatus{Phase: tc.phase}}
			if got := PodFinished(p); got != tc.want {
				t.Fatalf("PodFinished = %v, want %v", got, tc.want)
			}
		})
	}
}
