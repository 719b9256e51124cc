//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Names the local cluster uses (hack/cluster/lib.sh).
const (
	// DefaultState is $HAMI_GO_STATE's default.
	DefaultState = "/var/lib/hami-go-cluster"
	// DefaultNodeName is the one kubelet node (network namespace hami-node1, IP 10.200.0.2).
	DefaultNodeName = "hami-node1"
	// WorkloadImage is the static workload program's image (hack/workload): argv[0] picks
	// ray, envdump, sleep or pause. The same image is tagged docker.io/rayproject/ray:2.46.0.
	WorkloadImage = "docker.io/hami-go/workload:0.1.0"
)

// Cluster is a client of the running local cluster.
type Cluster struct {
	// State is $HAMI_GO_STATE (kubeconfig, logs/<component>.log).
	State string
	// NodeName is the kubelet node ($HAMI_GO_NODE_NAME, default hami-node1).
	NodeName string
	// Config is the REST config from State/kubeconfig (QPS 100, burst 200).
	Config *rest.Config
	// Client is a clientset on Config.
	Client kubernetes.Interface
}

// NewCluster connects to the local cluster; it fails the test with the command to run when the
// cluster is not up, and checks that the API server answers and the node is Ready.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	state := os.Getenv("HAMI_GO_STATE")
	if state == "" {
		state = DefaultState
	}
	node := os.Getenv("HAMI_GO_NODE_NAME")
	if node == "" {
		node = DefaultNodeName
	}
	kc := filepath.Join(state, "kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v (bring the cluster up with hack/cluster/up.sh)", kc, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	c := &Cluster{State: state, NodeName: node, Config: cfg, Client: cs}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node %s: %v (is the local cluster up? hack/cluster/up.sh)", node, err)
	}
	if !nodeReady(n) {
		t.Fatalf("node %s is not Ready: %+v (kubelet log: %s/logs/kubelet.log)", node, n.Status.Conditions, state)
	}
	return c
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Namespace creates a namespace named after the test with a random suffix, waits for its
// default ServiceAccount, and deletes it when the test ends (unless HAMI_GO_E2E_KEEP=1).
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	base := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(base) > 40 {
		base = base[:40]
	}
	name := strings.Trim(base, "-") + "-" + rand.String(5)
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{"hami-go.io/e2e": "true"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if os.Getenv("HAMI_GO_E2E_KEEP") == "1" {
			t.Logf("keeping namespace %s (HAMI_GO_E2E_KEEP=1)", name)
			return
		}
		zero := int64(0)
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: no default ServiceAccount after 60s (is kube-controller-manager running? %s/logs/kube-controller-manager.log)", name, c.State)
	}
	return name
}

// CreatePod creates pod (its namespace must be set) and returns the created object.
func (c *Cluster) CreatePod(t testing.TB, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := c.Client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return got
}

// WaitForPod polls pod ns/name until cond returns true, and returns it. On timeout it fails
// the test with the pod's status and events, so the reason is in the test output.
func (c *Cluster) WaitForPod(t testing.TB, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, nil // transient; retry until timeout
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: not %s after %v\n%s", ns, name, what, timeout, c.describe(ns, name, last))
	}
	return last
}

// WaitForPhase waits until the pod reaches phase; reaching another terminal phase first fails.
func (c *Cluster) WaitForPhase(t testing.TB, ns, name string, phase corev1.PodPhase, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var wrong corev1.PodPhase
	p := c.WaitForPod(t, ns, name, timeout, "in phase "+string(phase), func(p *corev1.Pod) bool {
		if p.Status.Phase != phase && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
			wrong = p.Status.Phase
			return true
		}
		return p.Status.Phase == phase
	})
	if wrong != "" {
		t.Fatalf("pod %s/%s: phase %s, want %s\n%s", ns, name, wrong, phase, c.describe(ns, name, p))
	}
	return p
}

// WaitForRunning waits until the pod is Running with every container started.
func (c *Cluster) WaitForRunning(t testing.TB, ns, name string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	c.WaitForPhase(t, ns, name, corev1.PodRunning, timeout)
	return c.WaitForPod(t, ns, name, timeout, "running all containers", func(p *corev1.Pod) bool {
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running == nil {
				return false
			}
		}
		return len(p.Status.ContainerStatuses) == len(p.Spec.Containers)
	})
}

// Logs returns a container's log, read through the API server (which reads the kubelet).
func (c *Cluster) Logs(t testing.TB, ns, name, container string) string {
	t.Helper()
	b, err := c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container}).Do(context.Background()).Raw()
	if err != nil {
		t.Fatalf("logs of %s/%s[%s]: %v", ns, name, container, err)
	}
	return string(b)
}

// WaitForLog waits until a container's log contains substr and returns the log.
func (c *Cluster) WaitForLog(t testing.TB, ns, name, container, substr string, timeout time.Duration) string {
	t.Helper()
	var out string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		b, err := c.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container}).Do(ctx).Raw()
		if err != nil {
			return false, nil
		}
		out = string(b)
		return strings.Contains(out, substr), nil
	})
	if err != nil {
		t.Fatalf("log of %s/%s[%s] lacks %q after %v; log so far:\n%s", ns, name, container, substr, timeout, out)
	}
	return out
}

// describe renders a pod's phase, conditions, container states and events for failures.
func (c *Cluster) describe(ns, name string, p *corev1.Pod) string {
	var b strings.Builder
	if p != nil {
		fmt.Fprintf(&b, "phase=%s reason=%q message=%q node=%q\n", p.Status.Phase, p.Status.Reason, p.Status.Message, p.Spec.NodeName)
		for _, cond := range p.Status.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s %s %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		for _, s := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "  container %s: %+v\n", s.Name, s.State)
		}
	}
	evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "  event %s %s: %s\n", e.Type, e.Reason, e.Message)
		}
	}
	fmt.Fprintf(&b, "  (component logs: %s/logs)", c.State)
	return b.String()
}
