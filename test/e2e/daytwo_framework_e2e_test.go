//go:build e2e && daytwo

// The day-two suite (issue 28: failover, uninstall) runs apart from the main suite: its files
// carry the build tag daytwo besides e2e, so `go test -tags e2e` (make test-e2e) never builds
// them, and `make test-daytwo` runs them (`go test -tags 'e2e daytwo' -run TestDayTwo`).

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// releaseName is the Helm release up.sh installs.
const releaseName = "hami-go"

// helmCLI runs the helm binary of the cluster's tools (build-tools.sh) on the cluster; kubectl
// is the tools' kubectl.
type helmCLI struct {
	bin, kubectl, kubeconfig string
}

func (c *Cluster) helm(t testing.TB) helmCLI {
	t.Helper()
	bin := strings.TrimSpace(lastLine(c.clusterScript(t, "build-tools.sh", "helm", "kubectl")))
	return helmCLI{bin: filepath.Join(bin, "helm"), kubectl: filepath.Join(bin, "kubectl"), kubeconfig: filepath.Join(c.State, "kubeconfig")}
}

// run runs helm with args in the chart's namespace and returns its output; a failure fails the test.
func (h helmCLI) run(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, append(args, "-n", chartNamespace, "--kubeconfig", h.kubeconfig)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// revision is the release's current revision (helm status).
func (h helmCLI) revision(t testing.TB) int {
	t.Helper()
	out := h.run(t, "status", releaseName, "-o", "json")
	var st struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Version == 0 {
		t.Fatalf("helm status: no revision in %q (%v)", out, err)
	}
	return st.Version
}

// execIn runs cmd in a container of a running pod (kubectl exec: through the API server and the
// kubelet) and returns its stdout.
func (h helmCLI) execIn(t testing.TB, ns, pod, container string, cmd ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--kubeconfig", h.kubeconfig, "-n", ns, "exec", pod, "-c", container, "--"}, cmd...)
	var stdout, stderr bytes.Buffer
	x := exec.CommandContext(ctx, h.kubectl, args...)
	x.Stdout, x.Stderr = &stdout, &stderr
	if err := x.Run(); err != nil {
		t.Fatalf("kubectl exec %v in %s/%s[%s]: %v\nstdout: %s\nstderr: %s", cmd, ns, pod, container, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// requireServiceRouting fails the test unless the API server can call a webhook given as a
// Service: kube-apiserver runs with --enable-aggregator-routing=true (it calls the Service's
// endpoints) and the host routes the pod subnet to the node (hack/cluster/components.sh).
func (c *Cluster) requireServiceRouting(t testing.TB) {
	t.Helper()
	pidB, err := os.ReadFile(filepath.Join(c.State, "pids", "kube-apiserver.pid"))
	if err != nil {
		t.Fatalf("kube-apiserver's pid: %v", err)
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pidB)), "cmdline"))
	if err != nil {
		t.Fatalf("kube-apiserver's command line: %v", err)
	}
	if !strings.Contains(string(cmdline), "--enable-aggregator-routing=true") {
		t.Fatalf("kube-apiserver runs without --enable-aggregator-routing=true, so it cannot call the webhook's Service: restart it with this tree's scripts (hack/cluster/restart.sh restart kube-apiserver) or bring the cluster up again")
	}
	out, err := exec.Command("ip", "route", "get", "10.244.0.10").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "via 10.200.0.2") {
		t.Fatalf("the host does not route the pod subnet to the node (ip route get 10.244.0.10: %s %v): run this tree's hack/cluster/up.sh", out, err)
	}
}

// waitDeploymentReady waits until Deployment name in the chart's namespace has want updated,
// ready replicas and no others.
func (c *Cluster) waitDeploymentReady(t testing.TB, name string, want int32, timeout time.Duration) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(chartNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		s := d.Status
		last = fmt.Sprintf("generation %d/%d replicas %d updated %d ready %d", s.ObservedGeneration, d.Generation, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas)
		return s.ObservedGeneration >= d.Generation && s.Replicas == want && s.UpdatedReplicas == want && s.ReadyReplicas == want, nil
	})
	if err != nil {
		t.Fatalf("Deployment %s/%s: not %d ready replicas after %v (%s)", chartNamespace, name, want, timeout, last)
	}
}

// componentPods returns the chart's running pods of a component (label app.kubernetes.io/component)
// that are not being deleted.
func (c *Cluster) componentPods(t testing.TB, comp string) []corev1.Pod {
	t.Helper()
	l, err := c.Client.CoreV1().Pods(chartNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: labelComponent + "=" + comp})
	if err != nil {
		t.Fatalf("list %s pods: %v", comp, err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}
