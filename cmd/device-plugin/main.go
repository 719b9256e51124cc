// Command device-plugin is hami-go's per-node kubelet device plugin (DaemonSet). It parses flags
// into a deviceplugin.Config, opens the GPU backend (NVML, or a pkg/fake fleet picked by the
// node's profile label) and runs pkg/deviceplugin until SIGTERM; `device-plugin uninstall` runs
// the chart's pre-delete hook instead (nodeagent.Uninstall).
package main

import (
	"context"
	"os"

	"k8s.io/client-go/rest"

	"github.com/hami-go/hami-go/pkg/deviceplugin"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

// main runs the agent, or with the first argument "uninstall" the chart's pre-delete hook
// (nodeagent.Uninstall: the agents' DaemonSets deleted in the foreground, so each agent
// withdraws what it published while its RBAC still exists).
func main() {
	if len(os.Args) > 1 && os.Args[1] == nodeagent.UninstallCommand {
		os.Exit(nodeagent.UninstallMain("device-plugin", os.Args[2:]))
	}
	os.Exit(nodeagent.Main("device-plugin", os.Args[1:], parseOptions, run))
}

func run(ctx context.Context, o *options) error {
	// The claim writer patches every pod whose container claimed its plan; during a burst the
	// default client rate (5 qps, burst 10) delayed the claimed records by up to 8 s.
	client, err := nodeagent.Client(o.Node.Kubeconfig, func(rc *rest.Config) { rc.QPS, rc.Burst = 50, 100 })
	if err != nil {
		return err
	}
	b, err := nodeagent.OpenBackend(ctx, client, &o.Node, o.Plugin.NodeName)
	if err != nil {
		return err
	}
	defer b.Close()
	deps := deviceplugin.Deps{Client: client, PIDResolver: metrics.ProcCgroupResolver(metrics.NodeProcRoot()), Backend: b.Backend}
	if b.Fleet != nil {
		deps.Faults = b.Fleet
	}
	return deviceplugin.Run(ctx, o.Plugin, deps)
}
