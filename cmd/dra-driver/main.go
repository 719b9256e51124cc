// Command dra-driver is hami-go's DRA kubelet plugin gpu.hami-go.io (DaemonSet, the chart's
// mode: dra). It parses flags into a dra.Config, opens the GPU backend (NVML, or a pkg/fake
// fleet picked by the node's profile label) and runs pkg/dra until SIGTERM.
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
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/fake"
	"github.com/hami-go/hami-go/pkg/nvml"
)

func main() {
	o, err := parseOptions(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dra-driver:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		klog.ErrorS(err, "dra-driver failed")
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
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	deps := dra.Deps{Client: client}
	switch o.Backend {
	case backendFake:
		node, err := client.CoreV1().Nodes().Get(ctx, o.Driver.NodeName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("node %s (for its %s label): %w", o.Driver.NodeName, o.FakeProfileLabel, err)
		}
		spec := o.FakeProfile
		if v := node.Labels[o.FakeProfileLabel]; o.FakeProfileLabel != "" && v != "" {
			spec = v
		}
		prof, err := fake.ParseProfile(spec)
		if err != nil {
			return err
		}
		fleet, err := fake.New(o.Driver.NodeName, prof)
		if err != nil {
			return err
		}
		klog.InfoS("Fake GPU fleet", "node", o.Driver.NodeName, "profile", spec, "gpus", len(fleet.UUIDs()))
		deps.Backend = nvml.NewBackend(fleet.Library(), nvml.Options{Name: "fake"})
		if o.FakeFaultInjection {
			deps.Faults = fleet
		}
	default:
		b, closer, err := nvml.Open()
		if err != nil {
			return err
		}
		defer closer()
		deps.Backend = b
		deps.Options.PCIeRoot = func(bus string) string {
			a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(bus)
			if err != nil || a.Value.StringValue == nil {
				klog.V(2).InfoS("No PCIe root for GPU", "pciBusID", bus, "err", err)
				return ""
			}
			return *a.Value.StringValue
		}
	}
	return dra.Run(ctx, o.Driver, deps)
}
