// Command dra-driver is hami-go's DRA kubelet plugin gpu.hami-go.io (DaemonSet, the chart's
// mode: dra). It parses flags into a dra.Config, opens the GPU backend (NVML, or a pkg/fake
// fleet picked by the node's profile label) and runs pkg/dra until SIGTERM; `dra-driver uninstall`
// runs the chart's pre-delete hook instead (nodeagent.Uninstall).
package main

import (
	"context"
	"os"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// main runs the agent, or with the first argument "uninstall" the chart's pre-delete hook
// (nodeagent.Uninstall: the agents' DaemonSets deleted in the foreground, so each agent
// withdraws what it published while its RBAC still exists).
func main() {
	if len(os.Args) > 1 && os.Args[1] == nodeagent.UninstallCommand {
		os.Exit(nodeagent.UninstallMain("dra-driver", os.Args[2:]))
	}
	os.Exit(nodeagent.Main("dra-driver", os.Args[1:], parseOptions, run))
}

func run(ctx context.Context, o *options) error {
	client, err := nodeagent.Client(o.Node.Kubeconfig, o.tuneClient)
	if err != nil {
		return err
	}
	b, err := nodeagent.OpenBackend(ctx, client, &o.Node, o.Driver.NodeName)
	if err != nil {
		return err
	}
	defer b.Close()
	deps := dra.Deps{Client: client, Backend: b.Backend}
	deps.Options.PIDResolver = metrics.ProcCgroupResolver(metrics.NodeProcRoot())
	if o.FakeFaultInjection {
		deps.Faults = b.Fleet
	}
	if o.Node.Backend == nodeagent.BackendNVML {
		deps.Options.PCIeRoot = pcieRoot
	}
	return dra.Run(ctx, o.Driver, deps)
}

// pcieRoot is the PCIe root attribute of the GPU at PCI bus id bus; "" when sysfs does not tell.
func pcieRoot(bus string) string {
	a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(bus)
	if err != nil || a.Value.StringValue == nil {
		klog.V(2).InfoS("No PCIe root for GPU", "pciBusID", bus, "err", err)
		return ""
	}
	return *a.Value.StringValue
}
