package nodeagent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// A mode switch moves a node from one node agent to the other (issue 28): the node relabelled
// (hami-go.io/mode) or the chart's mode changed. Neither mode's scheduler counts what the other
// handed out (the extender charges plans, DRA's allocator claims), so the two agents never serve
// GPUs on the node at once: the leaving agent stops offering capacity and keeps serving the pods
// that hold its GPUs (Drain), and the arriving agent offers nothing until they are gone and the
// leaving agent has stopped (WaitOldMode). Pods keep their slices across the switch; new GPU pods
// wait for the node, and the node's preflight condition says why (FindingOldModeInUse).

// Components of the node agents' pods (the chart's app.kubernetes.io/component label).
const (
	ComponentDevicePlugin = "device-plugin"
	ComponentDRADriver    = "dra-driver"
	labelComponent        = "app.kubernetes.io/component"
	labelName             = "app.kubernetes.io/name"
)

// ModeSwitchPoll is the period of the mode switch's waits (Drain, WaitOldMode).
const ModeSwitchPoll = 2 * time.Second

// modeSwitchLogEvery is how often a wait that has not changed logs again what it waits for.
const modeSwitchLogEvery = time.Minute

// DevicePluginHolders lists, of the pods on node, those an arriving DRA driver must wait out:
// GPU pods the device plugin placed there (a planned allocation, device.AnnoPlanned) that have
// not finished, terminating ones included, and the device plugin's own pods still on the node
// (its NRI plugin answers container creations until it stops). Each entry is "namespace/name
// (why)", sorted. agents names hami-go's agent pods: their namespace and app.kubernetes.io/name
// ("" matches any); a pod elsewhere with the agents' labels (a tenant's) does not count.
func DevicePluginHolders(node string, agents AgentPods, pods []corev1.Pod) []string {
	var out []string
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != node || device.PodFinished(p) {
			continue
		}
		switch {
		case agents.is(p, ComponentDevicePlugin):
			out = append(out, p.Namespace+"/"+p.Name+" (the device plugin, stopping)")
		case p.Annotations[device.AnnoPlanned] != "":
			out = append(out, p.Namespace+"/"+p.Name+" (holds device-plugin slices)")
		}
	}
	sort.Strings(out)
	return out
}

// DRAHolders lists what an arriving device plugin must wait out: of the pods on node, those
// with a ResourceClaim that hami-go's DRA driver (draapi.DriverName) was allocated, until they
// have finished, terminating ones included (the kubelet still needs the driver to unprepare
// their claims), and the DRA driver's own pods still on the node; and, of claims (the
// cluster's), those allocated a device on node (AllocatedOnNode) that none of those pods holds:
// kube-scheduler writes a claim's allocation in its PreBind, before the pod's Binding
// (Kubernetes' dynamicresources plugin, KEP-4381), so a claim can hold a GPU of the node while
// no pod bound to it names the claim yet (issue 37, item 8). claim returns a pod's claim by
// namespace and name (nil: gone). Entries as DevicePluginHolders', a claim's "namespace/name
// (claim allocated on the node)".
func DRAHolders(node string, agents AgentPods, pods []corev1.Pod, claim func(namespace, name string) *resourceapi.ResourceClaim, claims []*resourceapi.ResourceClaim) []string {
	var out []string
	held := map[string]bool{} // claims ("namespace/name") a listed pod holds
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != node || device.PodFinished(p) {
			continue
		}
		if agents.is(p, ComponentDRADriver) {
			out = append(out, p.Namespace+"/"+p.Name+" (the DRA driver, stopping)")
			continue
		}
		for _, name := range podClaimNames(p) {
			if c := claim(p.Namespace, name); c != nil && allocatedByHAMiGo(c) {
				out = append(out, p.Namespace+"/"+p.Name+" (holds claim "+name+")")
				for _, n := range podClaimNames(p) {
					held[p.Namespace+"/"+n] = true
				}
				break
			}
		}
	}
	for _, c := range claims {
		if key := c.Namespace + "/" + c.Name; AllocatedOnNode(c, node) && !held[key] {
			held[key] = true
			out = append(out, key+" (claim allocated on the node)")
		}
	}
	sort.Strings(out)
	return out
}

// AllocatedOnNode reports whether c's allocation (status.allocation) gives it a device of
// hami-go's DRA driver (draapi.DriverName) on node: a result of that driver from node's pool.
// The driver publishes one pool per node, named after the node (pkg/dra Driver's
// DriverResources; its ResourceSlices are node-local, spec.nodeName), so the pool names the
// node. A claim not allocated, or no longer (deallocated: status.allocation cleared), holds
// nothing; a claim being deleted while still allocated does (the kubelet still has to
// unprepare it).
func AllocatedOnNode(c *resourceapi.ResourceClaim, node string) bool {
	if c == nil || c.Status.Allocation == nil {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == draapi.DriverName && r.Pool == node {
			return true
		}
	}
	return false
}

// AgentPods names hami-go's node agent pods: Namespace (the release's, where only its
// operators create pods) and Chart (their app.kubernetes.io/name); "" matches any.
type AgentPods struct {
	Namespace, Chart string
}

// is reports whether p is a hami-go node agent pod of component.
func (a AgentPods) is(p *corev1.Pod, component string) bool {
	return p.Labels[labelComponent] == component && (a.Chart == "" || p.Labels[labelName] == a.Chart) &&
		(a.Namespace == "" || p.Namespace == a.Namespace)
}

// podClaimNames are the names of p's ResourceClaims: those it names (spec.resourceClaims
// resourceClaimName) and those made from its templates (status.resourceClaimStatuses).
func podClaimNames(p *corev1.Pod) []string {
	var out []string
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil && *rc.ResourceClaimName != "" {
			out = append(out, *rc.ResourceClaimName)
		}
	}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil && *st.ResourceClaimName != "" {
			out = append(out, *st.ResourceClaimName)
		}
	}
	return out
}

func allocatedByHAMiGo(c *resourceapi.ResourceClaim) bool {
	if c.Status.Allocation == nil {
		return false
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == draapi.DriverName {
			return true
		}
	}
	return false
}

// ClaimSource lists the cluster's ResourceClaims (resource.k8s.io/v1) for DRAHolders.
type ClaimSource func() ([]*resourceapi.ResourceClaim, error)

// OldModeHolders reads what DevicePluginHolders (arriving is ComponentDRADriver) or DRAHolders
// (arriving is ComponentDevicePlugin) need from the API server: the pods on node and, for
// DRAHolders, their claims (read one by one, after the pods: kube-scheduler allocates a claim
// before it binds the pod, so a bound pod's claim is read with its allocation) and the
// cluster's claims from claims (WatchClaims; nil: listed through the API). agents as theirs.
// Errors: the pods or the claims could not be listed, or a claim could not be read (a claim not
// found counts as gone).
func OldModeHolders(ctx context.Context, c kubernetes.Interface, node string, agents AgentPods, arriving string, claims ClaimSource) ([]string, error) {
	list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, fmt.Errorf("list the pods on node %s: %w", node, err)
	}
	if arriving == ComponentDRADriver {
		// The reverse of DRAHolders' unbound claims does not arise: the extender's plan
		// (device.AnnoPlanned) reaches the pod in the Binding's write, with spec.nodeName
		// (pkg/extender Bind), so a pod planned on node is listed here.
		return DevicePluginHolders(node, agents, list.Items), nil
	}
	if claims == nil {
		claims = func() ([]*resourceapi.ResourceClaim, error) { return listClaims(ctx, c) }
	}
	all, err := claims()
	if err != nil {
		return nil, fmt.Errorf("list the ResourceClaims: %w", err)
	}
	var readErr error
	holders := DRAHolders(node, agents, list.Items, func(ns, name string) *resourceapi.ResourceClaim {
		rc, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) && readErr == nil {
				readErr = fmt.Errorf("read ResourceClaim %s/%s: %w", ns, name, err)
			}
			return nil
		}
		return rc
	}, all)
	return holders, readErr
}

// ClaimsOf is the ClaimSource of an arriving device plugin: WatchClaims where the API server
// serves resource.k8s.io/v1 (Kubernetes >= 1.34), and no claims where it does not (a device
// plugin on 1.30-1.33, which the chart supports: no DRA mode there to switch from, and an
// informer on an API that is not served would never sync, so the agent would wait forever at
// its first start). A discovery error other than NotFound keeps the watch, which retries.
func ClaimsOf(ctx context.Context, c kubernetes.Interface) ClaimSource {
	if _, err := c.Discovery().ServerResourcesForGroupVersion(resourceapi.SchemeGroupVersion.String()); apierrors.IsNotFound(err) {
		return func() ([]*resourceapi.ResourceClaim, error) { return nil, nil }
	}
	return WatchClaims(ctx, c)
}

// WatchClaims watches the cluster's ResourceClaims until ctx ends (a client-go informer, list
// and watch; managed fields dropped) and returns their lister as a ClaimSource, which lists them
// through the API until the informer has.
func WatchClaims(ctx context.Context, c kubernetes.Interface) ClaimSource {
	inf := resourceinformers.NewResourceClaimInformer(c, metav1.NamespaceAll, 0, cache.Indexers{})
	_ = inf.SetTransform(func(o any) (any, error) {
		if m, err := meta.Accessor(o); err == nil {
			m.SetManagedFields(nil)
		}
		return o, nil
	})
	go inf.Run(ctx.Done())
	lister := resourcelisters.NewResourceClaimLister(inf.GetIndexer())
	return func() ([]*resourceapi.ResourceClaim, error) {
		if !inf.HasSynced() {
			// Until the informer has listed them, one API list: a first start (nothing to
			// wait for) must not wait a poll period, or log an error, for the informer.
			return listClaims(ctx, c)
		}
		return lister.List(labels.Everything())
	}
}

// listClaims lists the cluster's ResourceClaims through the API.
func listClaims(ctx context.Context, c kubernetes.Interface) ([]*resourceapi.ResourceClaim, error) {
	l, err := c.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]*resourceapi.ResourceClaim, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

// describeHolders is holders for a message: the count and the first three.
func describeHolders(holders []string) string {
	shown := holders
	if len(shown) > 3 {
		shown = shown[:3]
	}
	s := fmt.Sprintf("%d: %s", len(holders), strings.Join(shown, ", "))
	if len(holders) > 3 {
		s += ", …"
	}
	return s
}

// ModeSwitchWait is one side of a mode switch's wait, polled every ModeSwitchPoll.
type ModeSwitchWait struct {
	// Node is this agent's node, for the log.
	Node string
	// What says what is waited for, in the log and the message ("the device-plugin mode's pods
	// and agent to leave the node").
	What string
	// Holders lists what is still there (empty: the wait is over). An error is logged and the
	// wait goes on (the safe side: never serve GPUs the other mode may still hand out).
	Holders func(ctx context.Context) ([]string, error)
	// Report, when set, gets the message while waiting ("" once the wait is over): the agent
	// puts it in the node's preflight condition (Enforcement.SetOldModeInUse).
	Report func(msg string)
	// Checked, when set, is called once, after the first look at Holders (and its Report):
	// the agent starts its preflight then, so that the node's condition says at once what the
	// agent waits for.
	Checked func()
	// Clock is injectable; nil = the real one.
	Clock clock.Clock
}

// Run waits until Holders is empty (nil), ctx ends (ctx's error) or timeout passes (timeout > 0;
// it then returns what is left, with a nil error). It logs what it waits for when that changes,
// at most every minute otherwise.
func (w ModeSwitchWait) Run(ctx context.Context, timeout time.Duration) ([]string, error) {
	clk := w.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	start := clk.Now()
	var last string
	var logged time.Time
	checked := w.Checked
	defer func() {
		if checked != nil {
			checked()
		}
	}()
	for {
		holders, err := w.Holders(ctx)
		if err != nil {
			klog.ErrorS(err, "Could not list what the mode switch waits for; waiting on", "node", w.Node, "waitingFor", w.What)
		} else if len(holders) == 0 {
			if w.Report != nil {
				w.Report("")
			}
			if last != "" {
				klog.InfoS("Mode switch wait over", "node", w.Node, "waitedFor", w.What, "after", clk.Since(start).Round(time.Second))
			}
			return nil, nil
		}
		if err == nil {
			msg := fmt.Sprintf("waiting for %s (%s)", w.What, describeHolders(holders))
			if msg != last || clk.Since(logged) >= modeSwitchLogEvery {
				klog.InfoS("Mode switch: waiting", "node", w.Node, "waitingFor", w.What, "holders", holders, "waited", clk.Since(start).Round(time.Second))
				last, logged = msg, clk.Now()
			}
			if w.Report != nil {
				w.Report(msg)
			}
		}
		if timeout > 0 && clk.Since(start) >= timeout {
			return holders, nil
		}
		if checked != nil {
			checked()
			checked = nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-clk.After(ModeSwitchPoll):
		}
	}
}

// ChartName is the app.kubernetes.io/name label of the agent's own pod (--pod-namespace,
// --pod-name), which names hami-go's pods in ModeSwitchWait's holders; "" (any) when the pod is
// unknown or cannot be read.
func (l *Life) ChartName(ctx context.Context) string {
	c := l.Config
	if c.PodName == "" || c.PodNamespace == "" {
		return ""
	}
	cctx, cancel := WithdrawContext(ctx)
	defer cancel()
	p, err := l.Client.CoreV1().Pods(c.PodNamespace).Get(cctx, c.PodName, metav1.GetOptions{})
	if err != nil {
		klog.ErrorS(err, "Reading the agent's own pod failed; any node agent pod counts in a mode switch", "pod", c.PodNamespace+"/"+c.PodName)
		return ""
	}
	return p.Labels[labelName]
}

// WaitOldModeGone is the arriving side of a mode switch for the agent (Life.Component, the
// arriving one: ComponentDevicePlugin or ComponentDRADriver): it returns once no pod on the node
// holds GPUs from the other mode and the other agent's pods are gone (OldModeHolders), at once
// when there are none (a first start, a restart). Meanwhile the node's preflight condition says
// what it waits for (Life.Enforcement, FindingOldModeInUse); checked is called after the first
// look (ModeSwitchWait.Checked). Errors: ctx's, when it ends first.
func (l *Life) WaitOldModeGone(ctx context.Context, checked func()) error {
	c, client, arriving := l.Config, l.Client, l.Component
	chart := l.ChartName(ctx)
	other := "device-plugin"
	if arriving == ComponentDevicePlugin {
		other = "DRA"
	}
	wctx, stop := context.WithCancel(ctx) // ends the claims' watch with the wait
	defer stop()
	var claims ClaimSource
	if arriving == ComponentDevicePlugin {
		claims = ClaimsOf(wctx, client)
	}
	var report func(string)
	if l.Enforcement != nil {
		report = l.Enforcement.SetOldModeInUse
	}
	w := ModeSwitchWait{Node: c.NodeName, Clock: l.Clock, Report: report, Checked: checked,
		What: "the " + other + " mode's GPU pods and node agent to leave the node",
		Holders: func(ctx context.Context) ([]string, error) {
			return OldModeHolders(ctx, client, c.NodeName, AgentPods{Namespace: c.PodNamespace, Chart: chart}, arriving, claims)
		}}
	_, err := w.Run(wctx, 0)
	return err
}

// Drain is the leaving side of a mode switch (Removal.Drain): it keeps the agent's servers up
// (the caller's doing) until holders, the pods or claims that still hold its GPUs, is empty,
// Config.DrainTimeout passes, or undone (when not nil; checked at every poll) says the switch
// was undone: the agent's DaemonSet selects the node again, and as its pod is still there the
// DaemonSet starts no agent of this mode until it is gone, so draining on would leave the node
// unserved while the pods run. It returns what is left then, logged. The agent has stopped
// offering capacity before (the device plugin released its Lease; the DRA driver published no
// devices).
func (l *Life) Drain(what string, holders func() []string, undone func() bool) []string {
	c, clk := l.Config, l.Clock
	left := holders()
	if len(left) > 0 && c.DrainTimeout > 0 {
		wasUndone := false
		w := ModeSwitchWait{Node: c.NodeName, Clock: clk, What: what,
			Holders: func(context.Context) ([]string, error) {
				if undone != nil && undone() {
					wasUndone = true
					return nil, nil
				}
				return holders(), nil
			}}
		left, _ = w.Run(context.Background(), c.DrainTimeout)
		if wasUndone {
			left = holders()
			klog.InfoS("Mode switch undone during the drain: stopping as for a restart; the next agent of this mode serves the pods", "node", c.NodeName, "holders", left)
			return left
		}
	}
	if len(left) > 0 {
		klog.ErrorS(nil, "Leaving the node with GPUs still held: --drain-timeout passed", "node", c.NodeName, "holders", left, "drainTimeout", c.DrainTimeout)
	}
	return left
}

// SwitchUndone is the undone check of a drain (Drain): whether the agent no longer leaves its
// node for good (CheckRemoval: its DaemonSet selects the node again). An error counts as not
// undone: the drain goes on.
func (l *Life) SwitchUndone(ctx context.Context) func() bool {
	c, client := l.Config, l.Client
	return func() bool {
		cctx, cancel := WithdrawContext(ctx)
		defer cancel()
		r, err := CheckRemoval(cctx, client, c.PodNamespace, c.PodName, c.NodeName)
		return err == nil && !r.ForGood
	}
}
