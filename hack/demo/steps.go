package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hami-go/hami-go/pkg/device"
)

// demo holds the clients and what went wrong so far.
type demo struct {
	kube        kubernetes.Interface
	dyn         dynamic.Interface
	ns, node    string
	stepTimeout time.Duration
	mode        string // modeDevicePlugin or modeDRA
	state       string // the local cluster's state directory ($HAMI_GO_STATE)
	agent       agent  // the node agent of mode, read at the start (driver.go)
	out         io.Writer
	problems    []string
	started     time.Time
}

// progress prints one progress line on stderr (the report goes to stdout).
func (d *demo) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(d.started).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) problem(format string, args ...any) {
	p := fmt.Sprintf(format, args...)
	d.problems = append(d.problems, p)
	fmt.Fprintf(d.out, "  !! %s\n", p)
}

func (d *demo) run(ctx context.Context, keep bool) error {
	d.started = time.Now()
	d.progress("waiting for the node's GPUs on node %s (%s mode)", d.node, d.mode)
	inv, err := d.inventory(ctx)
	if err != nil {
		return err
	}
	source := "the device plugin's inventory"
	if d.mode == modeDRA {
		source = "the DRA driver's ResourceSlices"
	}
	if d.agent, err = d.nodeAgent(ctx); err != nil {
		return err
	}
	fmt.Fprintln(d.out, driverLine(d.state, d.agent))
	fmt.Fprintf(d.out, "Node %s (%s mode): %d × %s, %d MiB each, split count %d, from %s\n", inv.Node, d.mode, len(inv.GPUs), inv.GPUs[0].Model, inv.GPUs[0].MemoryMiB, inv.SplitCount, source)
	if err := d.resetNamespace(ctx); err != nil {
		return err
	}

	steps := []struct {
		title    string
		cluster  string
		replicas int64
		gpu      workerGPU
		scaleTo  int64
	}{
		{"Step 1: KubeRay quick start, workers with one whole GPU each", "raycluster-kuberay", 2, workerGPU{}, 0},
		{"Step 2: the same workers asking for slices (20000 MiB, 25% cores)", "raycluster-slices", 2, workerGPU{memMiB: 20000, cores: 25}, 4},
	}
	for i, s := range steps {
		fmt.Fprintf(d.out, "\n== %s ==\n", s.title)
		d.progress("%s: creating RayCluster %s with %d workers", s.title, s.cluster, s.replicas)
		rc := newRayCluster(s.cluster, s.replicas, s.gpu)
		if _, err := d.dyn.Resource(rayClusterGVR).Namespace(d.ns).Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create RayCluster %s: %w", s.cluster, err)
		}
		pods, err := d.waitRay(ctx, s.cluster, int(s.replicas))
		if err != nil {
			return err
		}
		if err := d.fillAllocations(ctx, pods); err != nil {
			return err
		}
		d.report(ctx, inv, pods, s.gpu)
		if s.scaleTo > 0 {
			fmt.Fprintf(d.out, "\n== Step 3: the Ray autoscaler scales workers from %d to %d (RayCluster replicas) ==\n", s.replicas, s.scaleTo)
			d.progress("scaling %s to %d workers", s.cluster, s.scaleTo)
			patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/workerGroupSpecs/0/replicas","value":%d}]`, s.scaleTo)
			if _, err := d.dyn.Resource(rayClusterGVR).Namespace(d.ns).Patch(ctx, s.cluster, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("scale RayCluster %s: %w", s.cluster, err)
			}
			if pods, err = d.waitRay(ctx, s.cluster, int(s.scaleTo)); err != nil {
				return err
			}
			if err := d.fillAllocations(ctx, pods); err != nil {
				return err
			}
			d.report(ctx, inv, pods, s.gpu)
		}
		if i == len(steps)-1 {
			d.metrics(ctx, inv) // while the last step's pods still hold their slices
		}
		if i < len(steps)-1 || !keep {
			d.progress("deleting RayCluster %s", s.cluster)
			if err := d.deleteRayCluster(ctx, s.cluster); err != nil {
				return err
			}
		}
	}
	if keep {
		d.progress("keeping namespace %s and RayCluster %s (--keep); remove them with: kubectl delete namespace %s", d.ns, steps[len(steps)-1].cluster, d.ns)
	} else {
		d.progress("deleting namespace %s", d.ns)
		if err := d.kube.CoreV1().Namespaces().Delete(ctx, d.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete namespace %s: %w", d.ns, err)
		}
	}
	d.progress("done")
	return nil
}

// inventory waits for the node's GPUs: the device plugin's inventory annotation, or in DRA mode
// the driver's ResourceSlices.
func (d *demo) inventory(ctx context.Context) (device.Inventory, error) {
	var inv device.Inventory
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, d.stepTimeout, true, func(ctx context.Context) (bool, error) {
		if d.mode == modeDRA {
			n, err := d.clusterView(ctx)
			if err == nil {
				inv, err = draInventory(n)
			}
			last = err
			return err == nil, nil
		}
		n, err := d.kube.CoreV1().Nodes().Get(ctx, d.node, metav1.GetOptions{})
		if err != nil {
			last = err
			return false, nil
		}
		s, ok := n.Annotations[device.AnnoInventory]
		if !ok {
			last = fmt.Errorf("node %s has no %s annotation yet (device plugin not running?)", d.node, device.AnnoInventory)
			return false, nil
		}
		inv, last = device.DecodeInventory(s)
		return last == nil && len(inv.GPUs) > 0, nil
	})
	if err != nil {
		return inv, fmt.Errorf("inventory of node %s: %v (%v)", d.node, last, err)
	}
	return inv, nil
}

func (d *demo) resetNamespace(ctx context.Context) error {
	nsClient := d.kube.CoreV1().Namespaces()
	if err := nsClient.Delete(ctx, d.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete namespace %s: %w", d.ns, err)
	}
	d.progress("waiting for a previous namespace %s to go away", d.ns)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, d.stepTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := nsClient.Get(ctx, d.ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		return fmt.Errorf("namespace %s still terminating: %w", d.ns, err)
	}
	_, err := nsClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.ns}}, metav1.CreateOptions{})
	return err
}

func (d *demo) deleteRayCluster(ctx context.Context, name string) error {
	if err := d.dyn.Resource(rayClusterGVR).Namespace(d.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete RayCluster %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, d.stepTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := d.kube.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "ray.io/cluster=" + name})
		return err == nil && len(pods.Items) == 0, nil
	})
}
