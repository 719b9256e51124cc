package deviceplugin

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/hami-go/hami-go/pkg/device"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// EventReasonAllocateRefused is the reason of the Warning Event the plugin records on each pod
// a refused Allocate names (case C20: confusable pods in flight; no pod placed by hami-go
// waits for the call: the pods on the node that cannot be served), so `kubectl describe pod`
// shows why the kubelet's admission failed.
const EventReasonAllocateRefused = "GPUAllocateRefused"

// EventComponent is the source component of the plugin's Events.
const EventComponent = "hami-go-device-plugin"

// maxEventMessage is the longest Event message the plugin sends, bytes (events.k8s.io/v1 caps
// a note at 1 kB; the core/v1 API accepts more, but longer messages only clutter describe).
const maxEventMessage = 1024

// podRefusal is an Allocate error that names the pods it concerns.
type podRefusal interface {
	error
	Concerns() []device.PodRef
}

// NewEventRecorder returns a recorder that sends Events through client's core/v1 Events API as
// component EventComponent on host node, and a function that stops it (flushing what it can).
func NewEventRecorder(ctx context.Context, client kubernetes.Interface, node string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartStructuredLogging(4)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: EventComponent, Host: node}), b.Shutdown
}

func podObjectRef(r device.PodRef) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: r.Namespace, Name: r.Name, UID: r.UID}
}

// recordRefusal posts a Warning Event on every pod a refused Allocate names; a refusal that
// names no pod records nothing (the kubelet's own admission Event names the pod it admitted).
func (p *Plugin) recordRefusal(err error) {
	var pr podRefusal
	if p.opts.Recorder == nil || !errors.As(err, &pr) {
		return
	}
	full := "hami-go device plugin on node " + p.cfg.NodeName + " refused an Allocate call: " + err.Error()
	pods := pr.Concerns()
	for _, r := range pods {
		msg := truncateMessage(redactOtherNamespaces(full, r.Namespace, pods), maxEventMessage)
		p.opts.Recorder.Event(podObjectRef(r), corev1.EventTypeWarning, EventReasonAllocateRefused, msg)
	}
}

// redactOtherNamespaces replaces the names of pods outside namespace ns with "a pod in another
// namespace": an Event lives in its pod's namespace, and its readers may not see the others.
func redactOtherNamespaces(msg, ns string, pods []device.PodRef) string {
	for _, o := range pods {
		if o.Namespace != ns {
			msg = strings.ReplaceAll(msg, o.String(), "a pod in another namespace")
		}
	}
	return msg
}

// truncateMessage cuts s to at most n bytes on a rune boundary, ending in "…" when cut.
func truncateMessage(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const ell = "…"
	cut := n - len(ell)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ell
}
