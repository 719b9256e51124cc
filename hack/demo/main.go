// Command demo is `make demo`: on the local cluster (hack/cluster/up.sh, in either mode:
// HAMI_GO_MODE=deviceplugin or dra) with one node of 8 fake H100-80GB GPUs it reproduces the KubeRay scenario of the project's source articles and prints a
// report: a RayCluster like KubeRay's quick start (head without GPU, 2 workers with one GPU each),
// the same workers asking for slices (20000 MiB, 25% cores) so several share one card, and the
// worker group scaled from 2 to 4 as the Ray autoscaler would. It exits non-zero when anything is
// wrong. Only the API server (10.200.0.1) and the node's own address in its network namespace are
// contacted.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	state := os.Getenv("HAMI_GO_STATE")
	if state == "" {
		state = "/var/lib/hami-go-cluster"
	}
	kubeconfig := flag.String("kubeconfig", filepath.Join(state, "kubeconfig"), "kubeconfig of the local cluster")
	namespace := flag.String("namespace", "ray-demo", "namespace the demo creates and deletes")
	node := flag.String("node", "hami-node1", "the node with fake GPUs")
	stepTimeout := flag.Duration("step-timeout", 5*time.Minute, "longest wait for one step's pods")
	keep := flag.Bool("keep", false, "leave the last RayCluster and its namespace running")
	mode := flag.String("mode", envOr("HAMI_GO_MODE", modeDevicePlugin), "the cluster's mode: deviceplugin (allocations from the device plugin) or dra (from ResourceClaims); default $HAMI_GO_MODE")
	flag.Parse()
	if *mode != modeDevicePlugin && *mode != modeDRA {
		fail("--mode: %q is neither %s nor %s", *mode, modeDevicePlugin, modeDRA)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig %s: %v (is the local cluster up? make cluster-up)", *kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	d := &demo{
		kube:        kubernetes.NewForConfigOrDie(cfg),
		dyn:         dynamic.NewForConfigOrDie(cfg),
		ns:          *namespace,
		node:        *node,
		stepTimeout: *stepTimeout,
		mode:        *mode,
		state:       state,
		out:         os.Stdout,
	}
	ctx := context.Background()
	if err := d.run(ctx, *keep); err != nil {
		fmt.Fprint(os.Stdout, afterword) // a failed demo leaves the cluster up too: say how to look
		fail("%v", err)
	}
	if len(d.problems) > 0 {
		fmt.Fprintf(os.Stdout, "\nDEMO FAILED: %d problem(s):\n", len(d.problems))
		for _, p := range d.problems {
			fmt.Fprintf(os.Stdout, "  - %s\n", p)
		}
		fmt.Fprint(os.Stdout, afterword)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stdout, "\nDEMO OK: every check passed.")
	fmt.Fprint(os.Stdout, afterword)
}

// afterword is what `make demo` prints last, whether it passed or not: the cluster stays up,
// how to use it, how to stop it.
const afterword = `
The local cluster stays up. To use it from this checkout (KUBECONFIG, kubectl v1.37.2 and bin/ first on PATH):
  eval "$(hack/cluster/env.sh)"      # or: make shell
  kubectl get nodes
Run your own sliced pod: README.md, "Try it". Stop the cluster and remove its state: make cluster-down
`

// envOr is the value of the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "demo: "+format+"\n", args...)
	os.Exit(1)
}
