package nodeagent

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

func switchPod(name, node string, phase corev1.PodPhase, annotations, labels map[string]string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, Annotations: annotations, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
}

func agentLabels(component string) map[string]string {
	return map[string]string{labelComponent: component, labelName: "hami-go"}
}

// case C45, issue 28: an arriving DRA driver waits for the pods the device plugin placed on its node
// (running, pending or terminating; not finished) and for the device plugin itself, in the
// release's namespace: a tenant's pod with the agents' labels does not hold the switch up.
func TestDevicePluginHolders(t *testing.T) {
	planned := map[string]string{device.AnnoPlanned: `{"v":1}`}
	deleting := switchPod("terminating", "n1", corev1.PodRunning, planned, nil)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	pods := []corev1.Pod{
		switchPod("running", "n1", corev1.PodRunning, planned, nil),
		switchPod("placed", "n1", corev1.PodPending, planned, nil),
		deleting,
		switchPod("done", "n1", corev1.PodSucceeded, planned, nil),
		switchPod("failed", "n1", corev1.PodFailed, planned, nil),
		switchPod("cpu-only", "n1", corev1.PodRunning, nil, nil),
		switchPod("other-node", "n2", corev1.PodRunning, planned, nil),
		switchPod("hami-go-device-plugin-x", "n1", corev1.PodRunning, nil, agentLabels(ComponentDevicePlugin)),
		switchPod("other-chart-plugin", "n1", corev1.PodRunning, nil, map[string]string{labelComponent: ComponentDevicePlugin, labelName: "nvidia"}),
		switchPod("hami-go-dra-driver-y", "n1", corev1.PodRunning, nil, agentLabels(ComponentDRADriver)),
	}
	tenant := switchPod("fake-agent", "n1", corev1.PodRunning, nil, agentLabels(ComponentDevicePlugin))
	tenant.Namespace = "tenant-a"
	pods = append(pods, tenant)
	for i := range pods {
		if pods[i].Labels[labelComponent] != "" && pods[i].Namespace == "ml" {
			pods[i].Namespace = "hami-go-system"
		}
	}
	got := DevicePluginHolders("n1", AgentPods{Namespace: "hami-go-system", Chart: "hami-go"}, pods)
	want := []string{
		"hami-go-system/hami-go-device-plugin-x (the device plugin, stopping)",
		"ml/placed (holds device-plugin slices)",
		"ml/running (holds device-plugin slices)",
		"ml/terminating (holds device-plugin slices)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("holders = %q\nwant %q", got, want)
	}
	if got := DevicePluginHolders("n1", AgentPods{}, pods[8:9]); len(got) != 1 {
		t.Errorf("chart unknown: holders = %q, want any device-plugin component", got)
	}
}

// case C45, issue 28: an arriving device plugin waits for the pods whose claims hami-go's DRA driver was
// allocated (named or from a template) and for the DRA driver itself; claims of another
// driver, unallocated or gone do not hold.
func TestDRAHolders(t *testing.T) {
	name := func(s string) *string { return &s }
	claim := func(driver string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: driver, Pool: "n1", Device: "gpu-0"}}}}}}
	}
	claims := map[string]*resourceapi.ResourceClaim{
		"ml/direct":      claim(draapi.DriverName),
		"ml/generated-x": claim(draapi.DriverName),
		"ml/nic":         claim("nic.example.com"),
		"ml/pending":     {},
	}
	withClaim := func(pod string, direct bool, claimName string) corev1.Pod {
		p := switchPod(pod, "n1", corev1.PodRunning, nil, nil)
		if direct {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: name(claimName)}}
		} else {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: name("t")}}
			p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: name(claimName)}}
		}
		return p
	}
	done := withClaim("done", true, "direct")
	done.Status.Phase = corev1.PodSucceeded
	pods := []corev1.Pod{
		withClaim("a-direct", true, "direct"),
		withClaim("b-template", false, "generated-x"),
		withClaim("c-nic", true, "nic"),
		withClaim("d-unallocated", true, "pending"),
		withClaim("e-gone", true, "gone"),
		done,
		switchPod("hami-go-dra-driver-y", "n1", corev1.PodRunning, nil, agentLabels(ComponentDRADriver)),
		switchPod("hami-go-device-plugin-x", "n1", corev1.PodRunning, nil, agentLabels(ComponentDevicePlugin)),
	}
	got := DRAHolders("n1", AgentPods{Chart: "hami-go"}, pods, func(ns, n string) *resourceapi.ResourceClaim { return claims[ns+"/"+n] })
	want := []string{
		"ml/a-direct (holds claim direct)",
		"ml/b-template (holds claim generated-x)",
		"ml/hami-go-dra-driver-y (the DRA driver, stopping)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("holders = %q\nwant %q", got, want)
	}
}

// OldModeHolders reads the node's pods (field selector) and their claims through the API; a
// claim not found is gone, another read error is returned with what was found.
func TestOldModeHolders(t *testing.T) {
	cn := "gpu-claim"
	p := switchPod("trainer", "n1", corev1.PodRunning, nil, nil)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cn}}
	rc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: cn}, Status: resourceapi.ResourceClaimStatus{
		Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: draapi.DriverName}}}}}}
	dp := switchPod("dp-pod", "n1", corev1.PodRunning, map[string]string{device.AnnoPlanned: "x"}, nil)
	ctx := context.Background()
	c := fake.NewClientset(&p, rc, &dp)
	got, err := OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDevicePlugin)
	if err != nil || !reflect.DeepEqual(got, []string{"ml/trainer (holds claim gpu-claim)"}) {
		t.Errorf("arriving device plugin: %q, %v", got, err)
	}
	got, err = OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDRADriver)
	if err != nil || !reflect.DeepEqual(got, []string{"ml/dp-pod (holds device-plugin slices)"}) {
		t.Errorf("arriving DRA driver: %q, %v", got, err)
	}
	if err := c.ResourceV1().ResourceClaims("ml").Delete(ctx, cn, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDevicePlugin); err != nil || len(got) != 0 {
		t.Errorf("claim gone: %q, %v; want none", got, err)
	}
}

// The wait reports what it waits for (the preflight condition's message), returns once
// nothing holds the node, and stops with ctx; a list error keeps it waiting.
func TestModeSwitchWait(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	var mu sync.Mutex
	calls := 0
	var reports []string
	w := ModeSwitchWait{Node: "n1", What: "the device-plugin mode's GPU pods and node agent to leave the node", Clock: clk,
		Holders: func(context.Context) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			switch calls {
			case 1:
				return nil, errors.New("apiserver down")
			case 2, 3:
				return []string{"ml/a (holds device-plugin slices)", "ml/b (holds device-plugin slices)", "ml/c", "ml/d"}, nil
			}
			return nil, nil
		},
		Report: func(m string) { mu.Lock(); reports = append(reports, m); mu.Unlock() }}
	checked := 0
	w.Checked = func() { mu.Lock(); checked++; mu.Unlock() }
	done := make(chan error, 1)
	go func() { _, err := w.Run(context.Background(), 0); done <- err }()
	for i := 0; i < 3; i++ { // past the list error, then twice held, then none
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(ModeSwitchPoll)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	want := []string{
		"waiting for the device-plugin mode's GPU pods and node agent to leave the node (4: ml/a (holds device-plugin slices), ml/b (holds device-plugin slices), ml/c, …)",
		"waiting for the device-plugin mode's GPU pods and node agent to leave the node (4: ml/a (holds device-plugin slices), ml/b (holds device-plugin slices), ml/c, …)",
		"",
	}
	if !reflect.DeepEqual(reports, want) {
		t.Errorf("reports %q\nwant %q", reports, want)
	}
	if checked != 1 {
		t.Errorf("Checked called %d times, want once (after the first look)", checked)
	}
	w.Checked = func() { checked = 100 }
	w.Holders = func(context.Context) ([]string, error) { return nil, nil }
	if _, err := w.Run(context.Background(), 0); err != nil || checked != 100 {
		t.Errorf("nothing to wait for: Run = %v, Checked called: %v; want it called", err, checked == 100)
	}

	ctx, cancel := context.WithCancel(context.Background())
	w.Holders = func(context.Context) ([]string, error) { return []string{"ml/x"}, nil }
	go func() { _, err := w.Run(ctx, 0); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run after cancel = %v, want context.Canceled", err)
	}
}

// case C45, the leaving side: Drain returns once the holders are gone, or with what is left after
// --drain-timeout; 0 does not wait.
func TestDrain(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := Config{NodeName: "n1", DrainTimeout: 10 * time.Second}
	var mu sync.Mutex
	calls := 0
	holders := func() []string {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls > 3 {
			return nil
		}
		return []string{"ml/trainer"}
	}
	done := make(chan []string, 1)
	go func() { done <- c.Drain("pods to end", holders, nil, clk) }()
	for i := 0; i < 2; i++ { // holders' 2nd and 3rd calls hold; the 4th finds none
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(ModeSwitchPoll)
	}
	if left := <-done; len(left) != 0 {
		t.Errorf("left %q, want none once the pods ended", left)
	}

	always := func() []string { return []string{"ml/stuck"} }
	go func() { done <- c.Drain("pods to end", always, nil, clk) }()
	for i := 0; i < 5; i++ {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(ModeSwitchPoll)
	}
	if left := <-done; !reflect.DeepEqual(left, []string{"ml/stuck"}) {
		t.Errorf("after the timeout left %q, want ml/stuck", left)
	}
	// The switch undone (the DaemonSet selects the node again) at the third look: the drain
	// ends with the pod still there, long before the timeout.
	looks := 0
	undone := func() bool {
		mu.Lock()
		defer mu.Unlock()
		looks++
		return looks >= 3
	}
	start := clk.Now()
	go func() { done <- c.Drain("pods to end", always, undone, clk) }()
	for i := 0; i < 2; i++ {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(ModeSwitchPoll)
	}
	if left := <-done; !reflect.DeepEqual(left, []string{"ml/stuck"}) || looks != 3 || clk.Since(start) != 2*ModeSwitchPoll {
		t.Errorf("undone: left %q after %d looks and %v; want ml/stuck after 3 looks, %v", left, looks, clk.Since(start), 2*ModeSwitchPoll)
	}
	c.DrainTimeout = 0
	if left := c.Drain("pods to end", always, nil, clk); !reflect.DeepEqual(left, []string{"ml/stuck"}) {
		t.Errorf("--drain-timeout=0: left %q", left)
	}
}

// While an agent waits the mode switch out, the node's preflight condition says so: reason
// OldModeInUse, whatever else is missing (NRI not connected yet follows from it).
func TestPreflightSaysWhatTheSwitchWaitsFor(t *testing.T) {
	e := NewEnforcement(func() gpuenv.Config { return gpuenv.Config{Enforcement: gpuenv.EnforceNone} }, namedBackend{}, func(string) bool { return false })
	e.SetOldModeInUse("waiting for the DRA mode's GPU pods and node agent to leave the node (1: ml/a (holds claim c))")
	in := e.PreflightInput(nri.NewPlugin(nil), preflight.StrategyCDI, "")
	cond := preflight.Evaluate(in).Condition()
	if cond.Status != "False" || cond.Reason != preflight.FindingOldModeInUse || !strings.Contains(cond.Message, "OldModeInUse: mode switch: GPU pods wait until the other mode has left the node: waiting for the DRA mode's") {
		t.Errorf("condition %+v", cond)
	}
	e.SetOldModeInUse("")
	if _, ok := preflight.Evaluate(e.PreflightInput(nri.NewPlugin(nil), preflight.StrategyCDI, "")).Finding(preflight.FindingOldModeInUse); ok {
		t.Errorf("finding present outside a mode switch")
	}
}
