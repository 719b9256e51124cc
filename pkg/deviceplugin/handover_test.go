package deviceplugin

import (
	"context"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
)

// case C45: the plugin is Serving (and so holds the node's Lease) from the first device list a
// ListAndWatch stream sent until that stream ends (a kubelet restart, the plugin stopping).
func TestServingFollowsListAndWatch(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	p, _ := newTestPlugin(t, testConfig(dir), newTestBackend(1, 81559))
	startServe(t, p)
	r := k.waitRegistration(t, 5*time.Second)
	if p.Serving() {
		t.Fatal("Serving before any ListAndWatch")
	}
	changed := p.ServingChanged()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := k.client(t, r.Endpoint).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Serving after the first device list", p.Serving)
	select {
	case <-changed:
	default:
		t.Fatal("ServingChanged not signalled")
	}
	cancel()
	waitFor(t, "not Serving once the stream ended", func() bool { return !p.Serving() })
}

// case C45: the GPU pods placed on the node that the kubelet has not admitted yet are the ones
// the stopping plugin waits for: placed (a planned allocation), Pending, not being deleted, with
// no status the kubelet writes.
func TestAwaitingAdmission(t *testing.T) {
	placed := testPod("placed", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	placed.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	admitted := testPod("admitted", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	admitted.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodInitialized, Status: corev1.ConditionTrue}}
	creating := testPod("creating", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	creating.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	refused := testPod("refused", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	refused.Status.Phase = corev1.PodFailed
	deleting := testPod("deleting", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	deleting.Finalizers = []string{"x"}
	noGPU := testPod("no-gpu", t0, testNode, ctr{name: "c"})
	other := testPod("other", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-B"}})
	_, sync, _ := startPodSync(t, fake.NewClientset(placed, admitted, creating, refused, deleting, noGPU, other))
	got := sync.AwaitingAdmission()
	sort.Strings(got)
	if len(got) != 2 || got[0] != "default/other" || got[1] != "default/placed" {
		t.Fatalf("AwaitingAdmission = %v, want default/other and default/placed", got)
	}
}

// case C45: a stopping plugin releases the node's Lease, then keeps serving until the GPU pods
// placed on the node have been admitted by the kubelet (here: the pod's status written a moment
// later), at least handOverMin.
func TestHandOverReleasesThenWaitsForAdmission(t *testing.T) {
	placed := testPod("placed", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	client := fake.NewClientset(placed)
	p, sync, ctx := startPodSync(t, client)
	p.opts.Clock = clock.RealClock{}
	p.addStream(1) // a kubelet has the devices
	if err := RenewLease(ctx, client, p.cfg.LeaseNamespace, testNode, p.leaseHolder(), p.opts.Clock, true); err != nil {
		t.Fatal(err)
	}
	admitAfter := 1500 * time.Millisecond
	go func() {
		time.Sleep(admitAfter)
		q := placed.DeepCopy()
		q.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}}
		_, _ = client.CoreV1().Pods(q.Namespace).UpdateStatus(ctx, q, metav1.UpdateOptions{})
	}()
	start := time.Now()
	p.handOver(client, sync)
	took := time.Since(start)
	l, err := client.CoordinationV1().Leases(p.cfg.LeaseNamespace).Get(ctx, "hami-go-"+testNode, metav1.GetOptions{})
	if err != nil || !device.LeaseReleased(l) {
		t.Fatalf("Lease after the handover: %+v, %v; want released", l, err)
	}
	if took < admitAfter || took > handOverMax {
		t.Fatalf("handOver returned after %v; want once the pod was admitted (%v), before %v", took, admitAfter, handOverMax)
	}
}

// Without a kubelet stream (the kubelet restarting) nothing can be admitted: the hand-over only
// releases the Lease.
func TestHandOverWithoutKubelet(t *testing.T) {
	placed := testPod("placed", t0, testNode, ctr{name: "c", mem: 1000, gpus: []string{"GPU-A"}})
	client := fake.NewClientset(placed)
	p, sync, ctx := startPodSync(t, client)
	p.opts.Clock = clock.RealClock{}
	start := time.Now()
	p.handOver(client, sync)
	if took := time.Since(start); took >= handOverMin {
		t.Fatalf("handOver took %v without a kubelet stream; want at once", took)
	}
	if l, err := client.CoordinationV1().Leases(p.cfg.LeaseNamespace).Get(ctx, "hami-go-"+testNode, metav1.GetOptions{}); err != nil || !device.LeaseReleased(l) {
		t.Fatalf("Lease: %+v, %v; want released", l, err)
	}
}

// case C45: a stopping agent does not release a Lease the next agent holds already (started
// while this one hands over, as after a force delete); its own, or one an agent before the
// hand-over wrote (holder = the node's name), it releases.
func TestReleaseLeaseOnlyOwn(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	clk := clock.RealClock{}
	for _, tc := range []struct {
		holder   string
		released bool
	}{{"agent-new", false}, {"agent-old", true}, {testNode, true}, {"", true}} {
		if err := RenewLease(ctx, client, "kube-node-lease", testNode, tc.holder, clk, tc.holder != ""); err != nil {
			t.Fatal(err)
		}
		ok, err := ReleaseLease(ctx, client, "kube-node-lease", testNode, "agent-old", clk)
		l, gerr := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, "hami-go-"+testNode, metav1.GetOptions{})
		if err != nil || gerr != nil || ok != tc.released || device.LeaseReleased(l) != tc.released {
			t.Errorf("held by %q: ReleaseLease = %v, %v; Lease %+v; want released %v", tc.holder, ok, err, l.Spec, tc.released)
		}
	}
}
