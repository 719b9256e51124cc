// Command kube-scheduler-hami-go is kube-scheduler v1.37.2 built with hami-go's GPU placement
// as the framework plugin "HamiGo" (pkg/schedplugin): the in-process alternative to running
// kube-scheduler with hami-go's scheduler extender. It takes kube-scheduler's flags; a
// KubeSchedulerConfiguration profile enables the plugin (docs/components.md). It is a Go module
// of its own so that k8s.io/kubernetes stays out of the library's go.mod.
package main

import (
	"context"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/cli"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"

	"github.com/hami-go/hami-go/cmd/kube-scheduler-hami-go/nodefit"
	"github.com/hami-go/hami-go/pkg/schedplugin"
)

func main() {
	os.Exit(cli.Run(newCommand()))
}

// newCommand is kube-scheduler's command with two plugins in its registry: HamiGo, and
// HamiGoNodeResourcesFit (package nodefit), the chart's replacement for NodeResourcesFit. The
// latter reads the feature gates when kube-scheduler builds its profiles, after its flags
// (--feature-gates) have been applied, as the in-tree registry does.
func newCommand() *cobra.Command {
	return app.NewSchedulerCommand(
		app.WithPlugin(schedplugin.Name, schedplugin.New),
		app.WithPlugin(nodefit.Name, func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
			return nodefit.New(ctx, obj, h, feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate))
		}),
	)
}
