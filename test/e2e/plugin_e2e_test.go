//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/gpuview"
)

// buildPlugin builds cmd/kubectl-hami_go (as `make build` does) into a temporary folder.
func buildPlugin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-hami_go")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/kubectl-hami_go").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/kubectl-hami_go: %v\n%s", err, out)
	}
	return bin
}

// plugin runs the built plugin against the local cluster's kubeconfig.
func (c *Cluster) plugin(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--kubeconfig", filepath.Join(c.State, "kubeconfig")}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl-hami_go %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestPluginShowsSlices: two sliced pods run; `kubectl hami-go -o json` shows the node Ready and,
// on each pod's GPU, its slice with the MiB and percent it was given, and booked figures that add
// up; `kubectl hami-go why` explains a pod no node can take with the extender's reason and the
// scheduler's event, and a running pod with its allocation.
func TestPluginShowsSlices(t *testing.T) {
	c := NewCluster(t)
	c.requireChart(t)
	bin := buildPlugin(t)
	ns := e2eNamespace(t, c)

	c.CreatePod(t, gpuPod(ns, "slice-a", gpuLimits{count: 1, memMiB: 20000, cores: 25}))
	c.CreatePod(t, gpuPod(ns, "slice-b", gpuLimits{count: 1, memMiB: 10000, cores: 10}))
	want := map[string][2]int64{"slice-a": {20000, 25}, "slice-b": {10000, 10}}
	gpuOf := map[string]string{}
	for name := range want {
		p := c.WaitForRunning(t, ns, name, 2*time.Minute)
		_, claimed := allocations(t, p)
		if claimed == nil || len(claimed.Containers) != 1 || len(claimed.Containers[0].Devices) != 1 {
			t.Fatalf("%s: claimed allocation %+v", name, claimed)
		}
		gpuOf[name] = claimed.Containers[0].Devices[0].UUID
	}

	out := c.plugin(t, bin, "-o", "json")
	var v gpuview.View
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	var node *gpuview.Node
	for i := range v.Nodes {
		if v.Nodes[i].Name == c.NodeName {
			node = &v.Nodes[i]
		}
	}
	if node == nil || node.Status != gpuview.StatusReady || len(node.GPUs) == 0 || len(node.Errors) > 0 {
		t.Fatalf("node %s in the view: %+v", c.NodeName, node)
	}
	found := map[string]bool{}
	for _, g := range node.GPUs {
		var mib int64
		cores := 0
		for _, s := range g.Slices {
			mib += s.MemoryMiB
			cores += s.CoresPercent
			if s.Namespace != ns {
				continue
			}
			w, ok := want[s.Pod]
			if !ok || s.Container != "main" || s.Source != "claimed" || s.MemoryMiB != w[0] || int64(s.CoresPercent) != w[1] || g.UUID != gpuOf[s.Pod] {
				t.Errorf("GPU-%d %s: slice %+v; want pod on %s with %v", g.Index, g.UUID, s, gpuOf[s.Pod], w)
			}
			found[s.Pod] = true
		}
		if g.BookedMiB != mib || g.BookedCoresPercent != cores || g.Sharers != len(g.Slices) || g.MemoryMiB <= 0 {
			t.Errorf("GPU-%d: booked %d MiB, %d%%, %d sharers; its slices hold %d MiB, %d%%, %d", g.Index, g.BookedMiB, g.BookedCoresPercent, g.Sharers, mib, cores, len(g.Slices))
		}
	}
	if len(found) != 2 {
		t.Errorf("slices of %v found, want slice-a and slice-b:\n%s", found, out)
	}
	t.Logf("kubectl hami-go:\n%s", c.plugin(t, bin))

	// A pod asking for more GPUs than the node has: Pending, the extender's reason.
	n := len(node.GPUs) + 1
	c.CreatePod(t, gpuPod(ns, "too-many", gpuLimits{count: n, memMiB: 1000}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range l.Items {
			if e.InvolvedObject.Name == "too-many" && e.Reason == "FailedScheduling" {
				return true, nil
			}
		}
		return false, nil
	})
	why := c.plugin(t, bin, "why", "too-many", "-n", ns)
	t.Logf("kubectl hami-go why too-many:\n%s", why)
	for _, s := range []string{
		"Pod " + ns + "/too-many: Pending, scheduler hami-go-scheduler\n",
		"fits on no node now",
		`"main" (app): ` + strconv.Itoa(n) + " GPUs, 1000 MiB per GPU",
		c.NodeName + `: container "main" (` + strconv.Itoa(n) + ` GPUs, 1000 MiB): node has ` + strconv.Itoa(n-1) + " GPUs (even with the node empty)",
		"Last FailedScheduling (",
	} {
		if !strings.Contains(why, s) {
			t.Errorf("why too-many lacks %q", s)
		}
	}
	if p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), "too-many", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Errorf("too-many: %v, phase %v", err, p.Status.Phase)
	}
	why = c.plugin(t, bin, "why", "slice-a", "-n", ns)
	t.Logf("kubectl hami-go why slice-a:\n%s", why)
	if !strings.Contains(why, "bound to node "+c.NodeName) || !strings.Contains(why, "main: "+gpuOf["slice-a"]+"  20000 MiB  25% cores") {
		t.Errorf("why slice-a lacks its allocation")
	}
}
