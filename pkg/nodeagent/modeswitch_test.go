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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
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
	got := DRAHolders("n1", AgentPods{Chart: "hami-go"}, pods, func(ns, n string) *resourceapi.ResourceClaim { return claims[ns+"/"+n] }, nil)
	want := []string{
		"ml/a-direct (holds claim direct)",
		"ml/b-template (holds claim generated-x)",
		"ml/hami-go-dra-driver-y (the DRA driver, stopping)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("holders = %q\nwant %q", got, want)
	}

	// Issue 37, item 8: the cluster's claims. One allocated on n1 before its pod binds holds the
	// switch; the claims the listed pods hold are not listed twice; claims on another node,
	// deallocated or of another driver do not hold.
	all := []*resourceapi.ResourceClaim{
		allocatedClaim("ml", "direct", draapi.DriverName, "n1"),
		allocatedClaim("ml", "generated-x", draapi.DriverName, "n1"),
		allocatedClaim("ml", "unbound", draapi.DriverName, "n1"),
		allocatedClaim("ml", "elsewhere", draapi.DriverName, "n2"),
		allocatedClaim("ml", "nic", "nic.example.com", "n1"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "deallocated"}},
	}
	got = DRAHolders("n1", AgentPods{Chart: "hami-go"}, pods, func(ns, n string) *resourceapi.ResourceClaim { return claims[ns+"/"+n] }, all)
	want = append(want[:2:2], "ml/hami-go-dra-driver-y (the DRA driver, stopping)", "ml/unbound (claim allocated on the node)")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("with the cluster's claims: holders = %q\nwant %q", got, want)
	}
	// No pod on the node at all (the DRA driver gone, its pod not bound yet): the claim alone
	// holds the switch.
	if got := DRAHolders("n1", AgentPods{}, nil, func(string, string) *resourceapi.ResourceClaim { return nil }, all[2:]); !reflect.DeepEqual(got, []string{"ml/unbound (claim allocated on the node)"}) {
		t.Errorf("no pods: holders = %q, want the unbound claim", got)
	}
}

func allocatedClaim(ns, name, driver, pool string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: driver, Pool: pool, Device: "gpu-0"}}}}}}
}

// Issue 37, item 8: which claims hold an arriving device plugin's node, whatever pod uses them.
// kube-scheduler sets status.allocation in PreBind, before the Binding, and clears it when the
// claim is deallocated.
func TestAllocatedOnNode(t *testing.T) {
	deleting := allocatedClaim("ml", "c", draapi.DriverName, "n1")
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	twoDrivers := allocatedClaim("ml", "c", "nic.example.com", "n1")
	twoDrivers.Status.Allocation.Devices.Results = append(twoDrivers.Status.Allocation.Devices.Results,
		resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: draapi.DriverName, Pool: "n1", Device: "gpu-1"})
	for _, c := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  bool
	}{
		{"allocated on this node before its pod binds", allocatedClaim("ml", "c", draapi.DriverName, "n1"), true},
		{"allocated on another node", allocatedClaim("ml", "c", draapi.DriverName, "n2"), false},
		{"deallocated", &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "c"}}, false},
		{"another driver on this node", allocatedClaim("ml", "c", "nic.example.com", "n1"), false},
		{"another driver's pool named after another node", allocatedClaim("ml", "c", "nic.example.com", "n2"), false},
		{"being deleted, still allocated", deleting, true},
		{"one result of ours among others", twoDrivers, true},
		{"allocated, no results", &resourceapi.ResourceClaim{Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}, false},
		{"nil", nil, false},
	} {
		if got := AllocatedOnNode(c.claim, "n1"); got != c.want {
			t.Errorf("%s: AllocatedOnNode = %v, want %v", c.name, got, c.want)
		}
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
	got, err := OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDevicePlugin, nil)
	if err != nil || !reflect.DeepEqual(got, []string{"ml/trainer (holds claim gpu-claim)"}) {
		t.Errorf("arriving device plugin: %q, %v", got, err)
	}
	got, err = OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDRADriver, nil)
	if err != nil || !reflect.DeepEqual(got, []string{"ml/dp-pod (holds device-plugin slices)"}) {
		t.Errorf("arriving DRA driver: %q, %v", got, err)
	}
	if err := c.ResourceV1().ResourceClaims("ml").Delete(ctx, cn, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDevicePlugin, nil); err != nil || len(got) != 0 {
		t.Errorf("claim gone: %q, %v; want none", got, err)
	}
	// Issue 37, item 8: a claim allocated on n1 whose pod is not bound yet holds the switch,
	// listed through the API (nil source) or watched (WatchClaims).
	if _, err := c.ResourceV1().ResourceClaims("ml").Create(ctx, allocatedClaim("ml", "unbound", draapi.DriverName, "n1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResourceV1().ResourceClaims("ml").Create(ctx, allocatedClaim("ml", "elsewhere", draapi.DriverName, "n2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"ml/unbound (claim allocated on the node)"}
	if got, err := OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDevicePlugin, nil); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("unbound claim, listed: %q, %v; want %q", got, err, want)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	// Watched: answered at once (listed through the API until the informer has synced, so a
	// first start waits no poll for it), and the same once the informer has.
	claims := WatchClaims(wctx, c)
	for _, when := range []string{"before the informer synced", "after"} {
		if got, err := OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDevicePlugin, claims); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("unbound claim, watched %s: %q, %v; want %q", when, got, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := OldModeHolders(ctx, c, "n1", AgentPods{}, ComponentDevicePlugin, func() ([]*resourceapi.ResourceClaim, error) {
		return nil, errors.New("forbidden")
	}); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("claims unlisted: err %v, want it returned (the wait goes on)", err)
	}
}

// An API server without resource.k8s.io/v1 (Kubernetes 1.30-1.33, where the chart runs the
// device plugin) has no claims: ClaimsOf answers none at once rather than an informer that would
// never sync and keep a first start waiting; with the API served it watches.
func TestClaimsOfWithoutTheResourceAPI(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	old := fake.NewClientset() // its discovery serves no group
	// and, as such a server, it answers a list of ResourceClaims 404 (a watch would never sync)
	old.PrependReactor("list", "resourceclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), "")
	})
	if got, err := ClaimsOf(ctx, old)(); err != nil || len(got) != 0 {
		t.Fatalf("no resource.k8s.io/v1: %v, %v; want no claims and no error", got, err)
	}
	served := fake.NewClientset(allocatedClaim("ml", "c", draapi.DriverName, "n1"))
	served.Resources = []*metav1.APIResourceList{{GroupVersion: resourceapi.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "resourceclaims", Namespaced: true, Kind: "ResourceClaim"}}}}
	claims := ClaimsOf(ctx, served)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := claims()
		if err == nil {
			if len(got) != 1 || got[0].Name != "c" {
				t.Fatalf("served: %v; want claim c", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("served: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
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
	l := &Life{Config: &c, Clock: clk}
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
	go func() { done <- l.Drain("pods to end", holders, nil) }()
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
	go func() { done <- l.Drain("pods to end", always, nil) }()
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
	go func() { done <- l.Drain("pods to end", always, undone) }()
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
	if left := l.Drain("pods to end", always, nil); !reflect.DeepEqual(left, []string{"ml/stuck"}) {
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
