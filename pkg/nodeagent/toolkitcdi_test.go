package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hami-go/hami-go/pkg/preflight"
)

// case C55: the agent's preflight reads the runtime's CDI spec directories under its host root
// (/etc/cdi under the host's /etc, /var/run/cdi as the charts mount it) and reports, as the
// node condition's reason, a GPU that does not resolve as <toolkit kind>=<UUID>.
func TestC55PreflightReadsTheToolkitsCDISpec(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	spec := filepath.Join(root, "var/run/cdi/nvidia.yaml")
	if err := os.MkdirAll(filepath.Dir(spec), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(names ...string) {
		s := "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
		for _, n := range names {
			s += "- name: " + n + "\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n"
		}
		if err := os.WriteFile(spec, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := fake.NewClientset(testNode())
	kind := "nvidia.com/gpu"
	p := &Preflight{Client: c, Node: "n1", HostRoot: root, Input: func() preflight.Input {
		return preflight.Input{RuntimeName: "containerd", RuntimeVersion: "v2.1.4", NRIConnected: true, Backend: BackendNVML,
			DeviceListStrategy: preflight.StrategyCDI, CDISpecDir: "/var/run/cdi", Enforcement: preflight.EnforceNone,
			ToolkitCDIKind: kind, GPUUUIDs: []string{"GPU-a", "GPU-b"}}
	}}
	condition := func() (reason, message string) {
		n, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range n.Status.Conditions {
			if string(cond.Type) == preflight.ConditionType {
				return cond.Reason, cond.Message
			}
		}
		return "", ""
	}

	write("GPU-a", "GPU-b")
	if f, _ := p.Evaluate(ctx).Finding(preflight.FindingToolkitCDISpec); !f.OK {
		t.Errorf("both GPUs in the spec: %+v", f)
	}
	if r, _ := condition(); r != preflight.ConditionReasonPassed {
		t.Errorf("condition reason %q, want %s", r, preflight.ConditionReasonPassed)
	}
	write("GPU-a")
	p.Evaluate(ctx)
	if r, m := condition(); r != preflight.FindingToolkitCDISpec || !strings.Contains(m, "nvidia.com/gpu=GPU-b not defined by the CDI specs in /etc/cdi, /var/run/cdi (absent: /etc/cdi)") {
		t.Errorf("GPU-b missing: condition %s: %s", r, m)
	}
	// An empty kind (nodes that bring the driver otherwise) reads nothing and checks nothing.
	kind = ""
	if f, _ := p.Evaluate(ctx).Finding(preflight.FindingToolkitCDISpec); !f.OK {
		t.Errorf("no toolkit kind: %+v", f)
	}
}
