// Command device-plugin is hami-go's per-node kubelet device plugin (DaemonSet). It parses flags
// into a deviceplugin.Config, opens the GPU backend (NVML, or a pkg/fake fleet picked by the
// node's profile label) and runs pkg/deviceplugin until SIGTERM.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/deviceplugin"
	"github.com/hami-go/hami-go/pkg/fake"
	"github.com/hami-go/hami-go/pkg/nvml"
)

func main() {
	o, err := parseOptions(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "device-plugin:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		klog.ErrorS(err, "device-plugin failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", o.Kubeconfig, err)
	}
	// The claim writer patches every allocated pod; during a burst the default client rate
	// (5 qps, burst 10) delayed the claimed records by up to 8 s behind Allocate, and the
	// extender keeps a confusable pod waiting until that record is written (case C20).
	rc.QPS, rc.Burst = 50, 100
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	deps := deviceplugin.Deps{Client: client, PIDResolver: deviceplugin.ProcCgroupResolver("/proc")}
	switch o.Backend {
	case backendFake:
		node, err := client.CoreV1().Nodes().Get(ctx, o.Plugin.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s (for its %s label): %w", o.Plugin.NodeName, o.FakeProfileLabel, err)
		}
		spec := fakeProfileSpec(node.Labels, o.FakeProfileLabel, o.FakeProfile)
		prof, err := fake.ParseProfile(spec)
		if err != nil {
			return err
		}
		fleet, err := fake.New(o.Plugin.NodeName, prof)
		if err != nil {
			return err
		}
		klog.InfoS("Fake GPU fleet", "node", o.Plugin.NodeName, "profile", spec, "gpus", len(fleet.UUIDs()))
		deps.Backend = nvml.NewBackend(fleet.Library(), nvml.Options{Name: "fake"})
		deps.Faults = fleet
	default:
		b, closer, err := nvml.Open()
		if err != nil {
			return err
		}
		defer closer()
		deps.Backend = b
	}
	pr, closePR, err := deviceplugin.DialPodResources(o.Plugin.PodResourcesSocket)
	if err != nil {
		return err
	}
	defer closePR()
	deps.PodResources = pr
	var _ device.Backend = deps.Backend
	return deviceplugin.Run(ctx, o.Plugin, deps)
}

// fakeProfileSpec picks the node's --fake-profile-label value, else --fake-profile.
func fakeProfileSpec(labels map[string]string, label, def string) string {
	if v := labels[label]; label != "" && v != "" {
		return v
	}
	return def
}
