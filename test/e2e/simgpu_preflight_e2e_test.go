//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/preflight"
)

// On the simulated GPU node (issue 35) the node agent's preflight reads the NVIDIA Container
// Toolkit's real config, where the GPU Operator keeps it (beside the runtime wrapper containerd's
// default runtime `nvidia` names: $STATE/toolkit/.config/nvidia-container-runtime/config.toml,
// hack/cluster/gpunode.sh), and reports the fail-open window open: the toolkit's default
// accept-nvidia-visible-devices-envvar-when-unprivileged = true lets any container's
// NVIDIA_VISIBLE_DEVICES reach every GPU (hami_go_node_enforcement_fail_open 1, the node
// condition's reason names the window). In the variant that closes it (the key set to false,
// HAMI_GO_TOOLKIT_ENVVAR_UNPRIVILEGED=false up.sh) the next evaluation (every minute) reports it
// closed (0, and the condition names neither finding). The test writes the variant into the file
// and restores the original when it ends. Before issue 36 item 6 the agents read only the host's
// /etc, found no config, and reported the window closed on this node.
func TestSimGPUPreflightReadsTheToolkitConfig(t *testing.T) {
	requireSimGPU(t)
	c := NewCluster(t)
	if b := c.agentBackend(t); b != "nvml" {
		t.Skipf("the node agent runs --backend=%s: the preflight's toolkit checks apply to the nvml backend", b)
	}
	cfg := filepath.Join(c.State, "toolkit/.config/nvidia-container-runtime/config.toml")
	orig, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatalf("the local node's toolkit config: %v", err)
	}
	const key = "accept-nvidia-visible-devices-envvar-when-unprivileged"
	if !strings.Contains(string(orig), key+" = true") {
		t.Skipf("%s does not set %s = true (the variant is on already?)", cfg, key)
	}
	node := map[string]string{"node": c.NodeName}
	window := func(reason string) bool {
		return reason == preflight.FindingFailOpenWindow || reason == preflight.FindingToolkitEnvvarWhenUnprivileged
	}

	c.waitAgentValue(t, "hami_go_node_enforcement_fail_open", node, 1, true, 2*time.Minute)
	if cond := c.preflightCondition(t); cond.Status != "False" || !window(cond.Reason) {
		t.Errorf("window open: preflight condition %s %s %q, want False with reason %s or %s",
			cond.Status, cond.Reason, cond.Message, preflight.FindingFailOpenWindow, preflight.FindingToolkitEnvvarWhenUnprivileged)
	}

	closed := strings.Replace(string(orig), key+" = true", key+" = false", 1)
	if err := os.WriteFile(cfg, []byte(closed), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(cfg, orig, 0o644); err != nil {
			t.Errorf("restore %s: %v", cfg, err)
			return
		}
		c.waitAgentValue(t, "hami_go_node_enforcement_fail_open", node, 1, true, 2*time.Minute)
	})
	c.waitAgentValue(t, "hami_go_node_enforcement_fail_open", node, 0, true, 2*time.Minute)
	if cond := c.preflightCondition(t); window(cond.Reason) {
		t.Errorf("window closed: preflight condition still %s %q", cond.Reason, cond.Message)
	}
}

// preflightCondition is the node's preflight condition now (its zero value when absent).
func (c *Cluster) preflightCondition(t testing.TB) corev1.NodeCondition {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %s: %v", c.NodeName, err)
	}
	for _, cond := range n.Status.Conditions {
		if string(cond.Type) == preflight.ConditionType {
			return cond
		}
	}
	return corev1.NodeCondition{}
}
