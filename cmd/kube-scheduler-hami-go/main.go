// Command kube-scheduler-hami-go is kube-scheduler v1.37.2 built with hami-go's GPU placement
// as the framework plugin "HamiGo" (pkg/schedplugin): the in-process alternative to running
// kube-scheduler with hami-go's scheduler extender. It takes kube-scheduler's flags; a
// KubeSchedulerConfiguration profile enables the plugin (docs/components.md). It is a Go module
// of its own so that k8s.io/kubernetes stays out of the library's go.mod.
package main

import (
	"os"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"github.com/hami-go/hami-go/cmd/kube-scheduler-hami-go/nodefit"
	"github.com/hami-go/hami-go/pkg/schedplugin"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

// newCommand is kube-scheduler's command with two plugins in its registry: HamiGo, and
// HamiGoNodeResourcesFit (package nodefit), the chart's replacement for NodeResourcesFit.
func newCommand() *cobra.Command {
	return app.NewSchedulerCommand(
		app.WithPlugin(schedplugin.Name, schedplugin.New),
		app.WithPlugin(nodefit.Name, nodefit.Factory),
	)
}
