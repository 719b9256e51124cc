package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// UninstallCommand is the first argument that makes a node agent binary run Uninstall instead
// of the agent (the chart's pre-delete hook Job: `device-plugin uninstall --namespace=...`).
const UninstallCommand = "uninstall"

// Uninstall is what helm uninstall must do before it deletes the release's objects (the chart's
// pre-delete hook, issue 28): Helm deletes everything at once, the agents' ServiceAccounts and
// RBAC with their DaemonSets, so an agent stopped by the deletion could no longer withdraw what
// it published on its node (its API calls are refused). Uninstall deletes the agents' DaemonSets
// and the named Deployments first, with propagation Foreground: each stays, marked deleted, until
// the garbage collector has deleted its pods and their kubelets have confirmed them gone, so every
// agent stops while its RBAC still exists and, seeing its DaemonSet deleted (RemovalOf),
// withdraws its publication. Once they are all gone it deletes the named Leases (kube-scheduler's
// leader election), which no process then renews or recreates.
type Uninstall struct {
	// Client is the API client (the hook's ServiceAccount).
	Client kubernetes.Interface
	// Namespace is the release namespace.
	Namespace string
	// DaemonSets and Deployments are the names to delete and wait for; a missing one is done.
	DaemonSets, Deployments []string
	// Leases are deleted once the workloads are gone; a missing one is no error.
	Leases []string
	// Timeout bounds the wait for the workloads to be gone.
	Timeout time.Duration
	// Poll is the interval between checks (0: one second).
	Poll time.Duration
}

// Run deletes the workloads, waits until they are gone and deletes the Leases. The error names
// what is still there at the timeout (a node whose kubelet does not answer keeps its agent's
// pod: `helm uninstall --no-hooks` skips the hook) or the call that failed.
func (u Uninstall) Run(ctx context.Context) error {
	poll := u.Poll
	if poll <= 0 {
		poll = time.Second
	}
	fg := metav1.DeletePropagationForeground
	type workload struct {
		kind, name string
		del        func(context.Context, string, metav1.DeleteOptions) error
		get        func(context.Context, string) error
	}
	apps := u.Client.AppsV1()
	var ws []workload
	for _, n := range u.DaemonSets {
		ws = append(ws, workload{"DaemonSet", n, apps.DaemonSets(u.Namespace).Delete,
			func(ctx context.Context, n string) error {
				_, err := apps.DaemonSets(u.Namespace).Get(ctx, n, metav1.GetOptions{})
				return err
			}})
	}
	for _, n := range u.Deployments {
		ws = append(ws, workload{"Deployment", n, apps.Deployments(u.Namespace).Delete,
			func(ctx context.Context, n string) error {
				_, err := apps.Deployments(u.Namespace).Get(ctx, n, metav1.GetOptions{})
				return err
			}})
	}
	start := time.Now()
	for _, w := range ws {
		err := w.del(ctx, w.name, metav1.DeleteOptions{PropagationPolicy: &fg})
		switch {
		case apierrors.IsNotFound(err):
			klog.InfoS("Already gone", "kind", w.kind, "namespace", u.Namespace, "name", w.name)
		case err != nil:
			return fmt.Errorf("delete %s %s/%s: %w", w.kind, u.Namespace, w.name, err)
		default:
			klog.InfoS("Deleting, with its pods first", "kind", w.kind, "namespace", u.Namespace, "name", w.name)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, u.Timeout)
	defer cancel()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		var left []string
		for _, w := range ws {
			err := w.get(wctx, w.name)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil && wctx.Err() == nil:
				return fmt.Errorf("read %s %s/%s: %w", w.kind, u.Namespace, w.name, err)
			default:
				left = append(left, w.kind+" "+w.name)
			}
		}
		if len(left) == 0 {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("after %v still waiting for %s in namespace %s to be gone: their pods have not terminated (kubectl -n %s get pods; a node whose kubelet does not answer keeps its agent's pod, and `helm uninstall --no-hooks` skips this hook)",
				u.Timeout, strings.Join(left, ", "), u.Namespace, u.Namespace)
		case <-t.C:
		}
	}
	klog.InfoS("The release's node agents and scheduler are gone", "namespace", u.Namespace, "took", time.Since(start).Round(time.Millisecond))
	var errs []error
	for _, n := range u.Leases {
		err := u.Client.CoordinationV1().Leases(u.Namespace).Delete(ctx, n, metav1.DeleteOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("delete Lease %s/%s: %w", u.Namespace, n, err))
		default:
			klog.InfoS("Deleted the Lease", "namespace", u.Namespace, "name", n)
		}
	}
	return errors.Join(errs...)
}

// ParseUninstall reads the uninstall command's flags (after the command word): --namespace
// (default $POD_NAMESPACE), --daemonsets, --deployments, --leases (comma-separated names),
// --timeout and --kubeconfig.
func ParseUninstall(args []string, getenv func(string) string) (u Uninstall, kubeconfig string, err error) {
	fs := pflag.NewFlagSet(UninstallCommand, pflag.ContinueOnError)
	fs.StringVar(&u.Namespace, "namespace", getenv("POD_NAMESPACE"), "the release namespace (default $POD_NAMESPACE)")
	fs.StringSliceVar(&u.DaemonSets, "daemonsets", nil, "DaemonSets of the node agents to delete and wait for (comma-separated)")
	fs.StringSliceVar(&u.Deployments, "deployments", nil, "Deployments to delete and wait for (comma-separated)")
	fs.StringSliceVar(&u.Leases, "leases", nil, "Leases in the namespace to delete once the workloads are gone (comma-separated)")
	fs.DurationVar(&u.Timeout, "timeout", 2*time.Minute, "how long to wait for the workloads' pods to be gone")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster)")
	if err := fs.Parse(args); err != nil {
		return u, "", err
	}
	switch {
	case fs.NArg() > 0:
		return u, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	case u.Namespace == "":
		return u, "", fmt.Errorf("--namespace is empty (and $POD_NAMESPACE is unset)")
	case u.Timeout <= 0:
		return u, "", fmt.Errorf("--timeout must be positive, got %v", u.Timeout)
	}
	return u, kubeconfig, nil
}

// UninstallMain runs the uninstall command of the node agent binary name with args (after the
// command word) and returns the process's exit status (cmd's main exits with it): 2 on
// bad flags, 1 when Run fails, 0 otherwise.
func UninstallMain(name string, args []string) int {
	u, kubeconfig, err := ParseUninstall(args, os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", name, UninstallCommand, err)
		return 2
	}
	if u.Client, err = Client(kubeconfig, nil); err != nil {
		klog.ErrorS(err, "API client")
		klog.Flush()
		return 1
	}
	if err := u.Run(context.Background()); err != nil {
		klog.ErrorS(err, "Uninstall failed")
		klog.Flush()
		return 1
	}
	klog.Flush()
	return 0
}
