// Command device-plugin is hami-go's per-node kubelet device plugin (DaemonSet). It parses flags
// into a deviceplugin.Config, opens the GPU backend (NVML, or a pkg/fake fleet picked by the
// node's profile label) and runs pkg/deviceplugin until SIGTERM.
package main

import (
	"context"

	"k8s.io/client-go/rest"

	"github.com/hami-go/hami-go/pkg/deviceplugin"
	"github.com/hami-go/hami-go/pkg/metrics"
	"github.com/hami-go/hami-go/pkg/nodeagent"
)

func main() { nodeagent.Main("device-plugin", parseOptions, run) }

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
