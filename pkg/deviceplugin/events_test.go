package deviceplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"fmt"
	"github.com/hami-go/hami-go/pkg/device"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

// newEventPlugin returns a test plugin whose refusals go through a real event broadcaster into
// a fake clientset (unit tests only), and that clientset.
func newEventPlugin(t *testing.T) (*Plugin, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	rec, stop := NewEventRecorder(ctx, cs, testNode)
	t.Cleanup(func() { stop(); cancel() })
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	p.opts.Recorder = rec
	return p, cs
}

// podEvents waits until the fake clientset holds want Events for pod uid and returns them.
func podEvents(t *testing.T, cs *fake.Clientset, uid types.UID, want int) []corev1.Event {
	t.Helper()
	var got []corev1.Event
	waitFor(t, "the refusal Events", func() bool {
		l, err := cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, e := range l.Items {
			if e.InvolvedObject.UID == uid {
				got = append(got, e)
			}
		}
		return len(got) >= want
	})
	return got
}

func checkRefusalEvent(t *testing.T, e corev1.Event, pod string, words ...string) {
	t.Helper()
	if e.Type != corev1.EventTypeWarning || e.Reason != EventReasonAllocateRefused || e.InvolvedObject.Kind != "Pod" ||
		e.InvolvedObject.Name != pod || e.Source.Component != EventComponent || e.Source.Host != testNode {
		t.Errorf("event on %s = type %q reason %q object %+v source %+v", pod, e.Type, e.Reason, e.InvolvedObject, e.Source)
	}
	for _, w := range append([]string{"hami-go device plugin on node node-1 refused an Allocate call"}, words...) {
		if !strings.Contains(e.Message, w) {
			t.Errorf("event on %s: message %q lacks %q", pod, e.Message, w)
		}
	}
}

// A refusal that names pods is posted as a Warning Event on each pod it names, so `kubectl
// describe pod` shows it beside the kubelet's admission error.
func TestAllocateRefusalEvents(t *testing.T) {
	tests := []struct {
		name string
		pods func() []*corev1.Pod // the pods on the node, each expected to get one Event
		ids  []string             // the kubelet's Allocate call
		// wantErr is part of Allocate's error; wantWords are parts of each pod's Event message.
		wantErr   string
		wantWords []string
	}{{
		// case C20 (was TestAllocateRefusalEventsC20): the refusal to guess between two
		// confusable pods in flight is posted on both pods.
		name: "C20",
		pods: func() []*corev1.Pod {
			return []*corev1.Pod{
				testPod("big", t0, testNode, ctr{name: "c", mem: 24576, gpus: []string{"GPU-A"}}),
				testPod("small", t0.Add(time.Second), testNode, ctr{name: "c", mem: 600, gpus: []string{"GPU-B"}}),
			}
		},
		ids:       []string{"GPU-B::0"},
		wantErr:   "refusing to guess",
		wantWords: []string{"refusing to guess", "default/big", "default/small", "24576 MiB", "600 MiB", "case C20"},
	}, {
		// (was TestAllocateRefusalEventNoPod) An Allocate that finds no pod placed by hami-go
		// names the pods on the node that cannot be served (here one bound by another
		// scheduler, without a plan); each gets the Event.
		name: "NoPod",
		pods: func() []*corev1.Pod {
			stray := testPod("stray", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
			delete(stray.Annotations, "hami-go.io/allocation-planned")
			stray.Spec.SchedulerName = "default-scheduler"
			return []*corev1.Pod{stray}
		},
		ids:     []string{"GPU-A::0"},
		wantErr: "no pod placed by hami-go",
		wantWords: []string{"no pod placed by hami-go on node node-1 waits for 1 device(s) of nvidia.com/gpu",
			"default/stray has no hami-go.io/allocation-planned annotation (not scheduled by hami-go-scheduler)"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, cs := newEventPlugin(t)
			pods := tc.pods()
			for _, pod := range pods {
				p.Ledger().UpsertPod(pod)
			}
			if _, err := alloc(t, p, tc.ids...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Allocate err = %v, want %q", err, tc.wantErr)
			}
			for _, pod := range pods {
				ev := podEvents(t, cs, pod.UID, 1)
				if len(ev) != 1 {
					t.Fatalf("%d events on %s, want 1", len(ev), pod.Name)
				}
				checkRefusalEvent(t, ev[0], pod.Name, tc.wantWords...)
			}
		})
	}
}

// Refusals that name no pod, and allocations that succeed, record nothing (record.FakeRecorder
// delivers synchronously; unit tests only).
func TestAllocateEventsOnlyForNamedPods(t *testing.T) {
	p, _ := newTestPlugin(t, testConfig(t.TempDir()), newTestBackend(2, 81559))
	rec := record.NewFakeRecorder(10)
	p.opts.Recorder = rec
	if _, err := alloc(t, p, "GPU-A::0"); err == nil {
		t.Fatal("Allocate with no pod at all succeeded")
	}
	p.Ledger().UpsertPod(testPod("ok", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}}))
	mustAlloc(t, p, "GPU-A::0")
	if n := len(rec.Events); n != 0 {
		t.Fatalf("%d events recorded (%q), want none", n, <-rec.Events)
	}
}

func TestTruncateMessage(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdefghij", 10, "abcdefghij"},
		{"abcdefghijk", 10, "abcdefg…"},
		{"ééééé", 8, "éé…"}, // never splits a rune (é is 2 bytes, … is 3)
	} {
		t.Run(fmt.Sprintf("%s/%d", c.in, c.n), func(t *testing.T) {
			if got := truncateMessage(c.in, c.n); got != c.want || len(got) > c.n {
				t.Errorf("truncateMessage(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
			}
		})
	}
}

// An Event lives in its pod's namespace: it names pods of that namespace only.
func TestRedactOtherNamespaces(t *testing.T) {
	pods := []device.PodRef{{Namespace: "team-a", Name: "big"}, {Namespace: "team-b", Name: "small"}}
	msg := "cannot tell team-a/big and team-b/small apart"
	tests := []struct {
		name string // the Event's namespace
		want string
	}{
		{name: "team-a", want: "cannot tell team-a/big and a pod in another namespace apart"},
		{name: "team-b", want: "cannot tell a pod in another namespace and team-b/small apart"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := redactOtherNamespaces(msg, tc.name, pods); got != tc.want {
				t.Errorf("%s sees %q, want %q", tc.name, got, tc.want)
			}
		})
	}
}
