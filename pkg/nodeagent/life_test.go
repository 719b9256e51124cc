package nodeagent

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// fakeAgent records the Life's calls of its steps in their order, with what the contexts
// said then: the stop (ctx) and the agent's own (agentCtx, which the drain needs up).
type fakeAgent struct {
	enf                *Enforcement
	stopsBeforeArrival bool
	holders            []string // held until the drain's third look

	mu        sync.Mutex
	calls     []string
	ctx       context.Context
	agentCtx  context.Context
	looks     int
	published chan struct{}
	checked   chan struct{}
	once      sync.Once
}

func (a *fakeAgent) record(call string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, call)
}

// state says whether the stop has come and whether the agent is still up.
func (a *fakeAgent) state() string {
	s := ""
	if a.ctx.Err() != nil {
		s += " stopped"
	}
	if a.agentCtx.Err() == nil {
		s += " agentUp"
	}
	return s
}

func (a *fakeAgent) Enforcement() *Enforcement { return a.enf }
func (a *fakeAgent) Handler() http.Handler     { return http.NotFoundHandler() }
func (a *fakeAgent) NRISource() nri.Source     { return nil }
func (a *fakeAgent) Start(ctx, agentCtx context.Context, g *nri.Plugin) (func(), error) {
	a.ctx, a.agentCtx = ctx, agentCtx
	a.record("start")
	return func() { a.record("stop") }, nil
}
func (a *fakeAgent) PreflightInput(*nri.Plugin) preflight.Input { return preflight.Input{} }
func (a *fakeAgent) SetPreflight(preflight.Report)              { a.once.Do(func() { close(a.checked) }) }
func (a *fakeAgent) Serve(ctx context.Context) error {
	<-ctx.Done()
	a.record("served:" + a.state())
	return nil
}
func (a *fakeAgent) StopsBeforeArrival() bool { return a.stopsBeforeArrival }
func (a *fakeAgent) Publish(ctx context.Context) (<-chan struct{}, error) {
	a.record("publish")
	close(a.published)
	return nil, nil
}
func (a *fakeAgent) HandOver() { a.record("handOver:" + a.state()) }
func (a *fakeAgent) Drain() (string, func() []string) {
	a.record("drain:" + a.state())
	return "pods to end", func() []string {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.looks++
		if a.looks >= 3 {
			return nil
		}
		return a.holders
	}
}
func (a *fakeAgent) Flush()                       { a.record("flush:" + a.state()) }
func (a *fakeAgent) Withdraw(ctx context.Context) { a.record("withdraw:" + a.state()) }

// Issue 39 item 1: the node agent's life runs its steps in one order (the order the day-two
// e2e checks: mode switch and undo, upgrade, uninstall). A restart publishes, hands over and
// stops serving; leaving the node for a mode switch (the DaemonSet gone) also drains while the
// agent stays up past the stop, decides again and withdraws; a stop while the old mode is still
// on the node ends the DRA driver's life at once, and the device plugin's through its stop.
func TestLifeOrder(t *testing.T) {
	yes := true
	ds := agentDaemonSet(nil)
	own := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: "agent-x1",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "node-1"}}
	// A GPU pod the device plugin placed: an arriving DRA driver waits for it.
	oldMode := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "trainer", Annotations: map[string]string{device.AnnoPlanned: "x"}},
		Spec: corev1.PodSpec{NodeName: "node-1"}}
	for _, tc := range []struct {
		name               string
		objects            []runtime.Object
		stopsBeforeArrival bool
		want               []string
	}{
		{"restart", []runtime.Object{ds, own, labelledNode(nil)}, false, []string{
			"start", "publish", "handOver: stopped agentUp", "served: stopped agentUp", "flush: stopped agentUp", "stop"}},
		{"leaving for good with a drain", []runtime.Object{own, labelledNode(nil)}, false, []string{
			"start", "publish", "handOver: stopped agentUp", "drain: stopped agentUp", "served: stopped agentUp",
			"flush: stopped agentUp", "withdraw: stopped", "stop"}},
		{"stopped waiting for the old mode, DRA", []runtime.Object{own, oldMode, labelledNode(nil)}, true, []string{
			"start", "served: stopped agentUp", "stop"}},
		{"stopped waiting for the old mode, device plugin", []runtime.Object{ds, own, oldMode, labelledNode(nil)}, false, []string{
			"start", "handOver: stopped agentUp", "served: stopped agentUp", "flush: stopped agentUp", "stop"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			stepping := make(chan struct{})
			defer close(stepping)
			go func() { // the waits' polls and the drain go on
				for {
					select {
					case <-stepping:
						return
					case <-time.After(5 * time.Millisecond):
						clk.Step(ModeSwitchPoll)
					}
				}
			}()
			cfg := &Config{NodeName: "node-1", PodNamespace: ds.Namespace, PodName: own.Name, DrainTimeout: time.Hour, MetricsAddress: "127.0.0.1:0"}
			client := fake.NewClientset(tc.objects...)
			a := &fakeAgent{stopsBeforeArrival: tc.stopsBeforeArrival, holders: []string{"ml/trainer"},
				published: make(chan struct{}), checked: make(chan struct{}),
				enf: NewEnforcement(func() gpuenv.Config { return gpuenv.Config{Enforcement: gpuenv.EnforceNone} }, namedBackend{}, func(string) bool { return false })}
			l := &Life{Config: cfg, Client: client, Component: ComponentDRADriver, Clock: clk}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx, func() (Agent, error) { return a, nil }) }()
			arriving := a.published
			if len(tc.want) < 3 || tc.want[1] != "publish" {
				arriving = a.checked // the first look found the old mode on the node
			}
			select {
			case <-arriving:
			case err := <-done:
				t.Fatalf("Run returned %v before the stop", err)
			case <-time.After(10 * time.Second):
				t.Fatal("no arrival after 10 s")
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return after the stop")
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			if !reflect.DeepEqual(a.calls, tc.want) {
				t.Errorf("calls\n %q\nwant\n %q", a.calls, tc.want)
			}
			if drained := slices.Contains(tc.want, "drain: stopped agentUp"); drained && a.looks < 3 {
				t.Errorf("the drain looked %d times at the holders; want it to wait until they are gone (3)", a.looks)
			}
		})
	}
}
