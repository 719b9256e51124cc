package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/preflight"
)

// PreflightInterval is how often a node agent evaluates its node's preflight again: the
// runtime, its NRI connection, CDI, the NVIDIA container toolkit's settings and the enforcement
// can change under a running agent.
const PreflightInterval = time.Minute

// HostRoot is where the node agents' DaemonSets mount the host's /etc read-only (as
// <HostRoot>/etc), for the preflight's reading of the runtime's and the NVIDIA container
// toolkit's configuration, and /var/run/cdi (as <HostRoot>/var/run/cdi) for the runtime's CDI
// specs (preflight.FindingToolkitCDISpec); the device plugin's driver dev root is there too
// (<HostRoot><driverRoot>/dev).
const HostRoot = "/host"

// Preflight evaluates a node's preflight (pkg/preflight) and reports it where an operator looks:
// every finding that does not hold in the agent's log (klog, the finding's key/values), the
// node condition preflight.ConditionType on the Node's status (`kubectl describe node`), and the
// last report through Report.
type Preflight struct {
	// Client patches the Node's status; Node names it.
	Client kubernetes.Interface
	Node   string
	// HostRoot is where the host's root filesystem (at least its /etc) is mounted read-only in
	// the agent ("/host"); "" reads nothing (the configs count as absent).
	HostRoot string
	// ToolkitConfigPaths and ContainerdConfigPaths are the host paths the configs are looked
	// for at below HostRoot, in order (Config's fields of the same names); nil = the defaults.
	ToolkitConfigPaths, ContainerdConfigPaths []string
	// Input returns what only the running agent knows (runtime, NRI, strategy, enforcement,
	// GPUs, toolkit CDI kind); Run fills Toolkit, Containerd and CDISpecs from HostRoot.
	Input func() preflight.Input
	// Changed, when set, returns a channel closed at the next change of what Input reports (the
	// NRI plugin's connection): Run evaluates again at once.
	Changed func() <-chan struct{}
	// Clock paces Run; default the real clock.
	Clock clock.WithTicker

	last preflight.Report
}

// Evaluate reads the host's configs, evaluates the preflight once and reports it (log and node
// condition; the condition is patched only when it changed). It returns the report.
func (p *Preflight) Evaluate(ctx context.Context) preflight.Report {
	in := p.Input()
	if p.HostRoot != "" {
		host := os.DirFS(p.HostRoot)
		in.Toolkit, in.Containerd = preflight.ReadNodeConfigs(host, p.ToolkitConfigPaths, p.ContainerdConfigPaths)
		if in.ToolkitCDIApplies() {
			// The runtime's CDI spec directories: /etc/cdi under the host's /etc, /var/run/cdi
			// mounted at <HostRoot>/var/run/cdi (the charts' host-cdi volume).
			in.CDISpecs = preflight.ReadCDISpecs(p.HostRoot, in.RuntimeCDISpecDirs())
		}
	}
	r := preflight.Evaluate(in)
	changed := !sameFindings(r, p.last)
	p.last = r
	if !changed {
		return r
	}
	for _, f := range r.Findings {
		switch {
		case f.OK:
			klog.V(2).InfoS("Preflight check holds", f.KeyValues()...)
		default:
			klog.InfoS("Preflight check does not hold", f.KeyValues()...)
		}
	}
	if err := p.patchCondition(ctx, r.Condition()); err != nil {
		klog.ErrorS(err, "Setting the preflight node condition failed", "node", p.Node, "condition", preflight.ConditionType)
	}
	return r
}

// Run evaluates the preflight at once, then every PreflightInterval and at every Changed, until
// ctx ends, calling report with each report.
func (p *Preflight) Run(ctx context.Context, report func(preflight.Report)) {
	if p.Clock == nil {
		p.Clock = clock.RealClock{}
	}
	t := p.Clock.NewTicker(PreflightInterval)
	defer t.Stop()
	for {
		var changed <-chan struct{}
		if p.Changed != nil {
			changed = p.Changed()
		}
		report(p.Evaluate(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-changed:
		}
	}
}

// patchCondition sets c on the Node's status (a strategic merge on conditions by type), its
// transition time now.
func (p *Preflight) patchCondition(ctx context.Context, c preflight.Condition) error {
	now := metav1.Now()
	nc := corev1.NodeCondition{Type: corev1.NodeConditionType(c.Type), Status: corev1.ConditionStatus(c.Status),
		Reason: c.Reason, Message: c.Message, LastHeartbeatTime: now, LastTransitionTime: now}
	b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{nc}}})
	if err != nil {
		return err
	}
	_, err = p.Client.CoreV1().Nodes().PatchStatus(ctx, p.Node, b) // a strategic merge: conditions merge by type
	return err
}

// sameFindings says whether a and b hold the same findings (what is reported).
func sameFindings(a, b preflight.Report) bool {
	if len(a.Findings) != len(b.Findings) {
		return false
	}
	for i := range a.Findings {
		if a.Findings[i] != b.Findings[i] {
			return false
		}
	}
	return true
}

// RemovePreflightCondition removes the node condition preflight.ConditionType (a strategic merge
// patch of the node's status that deletes the condition of that type), for an agent that leaves
// the node for good. A node without it, or gone, is no error.
func RemovePreflightCondition(ctx context.Context, c kubernetes.Interface, node string) error {
	b, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": preflight.ConditionType, "$patch": "delete"},
	}}})
	if err != nil {
		return err
	}
	_, err = c.CoreV1().Nodes().PatchStatus(ctx, node, b)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove condition %s from node %s: %w", preflight.ConditionType, node, err)
	}
	return nil
}
