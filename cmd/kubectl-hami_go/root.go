package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/yaml"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/gpuview"
)

// deps are what tests replace: the API client (nil: built from the kubeconfig flags) and the
// clock that judges Lease staleness (nil: the real one).
type deps struct {
	client kubernetes.Interface
	clock  clock.PassiveClock
}

// options are the parsed flags of one invocation.
type options struct {
	kube    *genericclioptions.ConfigFlags
	cfg     gpuview.Config
	output  string
	streams genericiooptions.IOStreams
	deps    deps
}

// newRootCommand builds `kubectl hami-go` with its subcommands `nodes` (the default) and `why`.
// d may be nil.
func newRootCommand(streams genericiooptions.IOStreams, d *deps) *cobra.Command {
	o := &options{kube: genericclioptions.NewConfigFlags(true), cfg: gpuview.DefaultConfig(), streams: streams}
	if d != nil {
		o.deps = *d
	}
	if o.deps.clock == nil {
		o.deps.clock = clock.RealClock{}
	}
	root := &cobra.Command{
		Use:           "hami-go",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl hami-go"},
		Short:         "Show hami-go's GPU slices per node and GPU, and why a GPU pod is Pending",
		Long:          "Show hami-go's GPU slices per node and GPU (model, memory booked/total in MiB, cores booked in percent, sharers/split count, health, and the pods holding slices), read from the API alone with the scheduler extender's rules.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: false,
		RunE:          func(cmd *cobra.Command, _ []string) error { return o.runNodes(cmd.Context()) },
		// kubectl plugins get no shell completion command of their own.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	pf := root.PersistentFlags()
	o.kube.AddFlags(pf)
	pf.StringVarP(&o.output, "output", "o", "", "output format: table (default), json or yaml (schema "+gpuview.APIVersion+", docs/components.md)")
	pf.DurationVar(&o.cfg.StaleAfter, "inventory-stale-after", o.cfg.StaleAfter, "Lease age after which a node is stale (set it as the extender's --inventory-stale-after)")
	pf.StringVar(&o.cfg.LeaseNamespace, "lease-namespace", o.cfg.LeaseNamespace, "namespace of the device plugins' Leases hami-go-<node> (the extender's --lease-namespace)")
	pf.StringVar(&o.cfg.SchedulerName, "scheduler-name", o.cfg.SchedulerName, "kube-scheduler profile whose pods the extender places (the extender's --scheduler-name)")
	cliflags.AddResourceNames(pf, &o.cfg.Resources)

	root.AddCommand(&cobra.Command{
		Use:   "nodes",
		Short: "Per node and GPU: model, memory and cores booked, sharers, health, and the pods holding slices",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return o.runNodes(cmd.Context()) },
	})
	root.AddCommand(&cobra.Command{
		Use:   "why POD",
		Short: "Explain where a GPU pod is, or why it is Pending: its request and each node's reason (the extender's)",
		Args:  cobra.ExactArgs(1),
		RunE:  func(cmd *cobra.Command, args []string) error { return o.runWhy(cmd.Context(), args[0]) },
	})
	return root
}

// complete validates the flags and returns the client.
func (o *options) complete() (kubernetes.Interface, error) {
	switch o.output {
	case "", "table", "json", "yaml":
	default:
		return nil, fmt.Errorf("--output: %q is not table, json or yaml", o.output)
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, err
	}
	if o.deps.client != nil {
		return o.deps.client, nil
	}
	rc, err := o.kube.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

func (o *options) runNodes(ctx context.Context) error {
	client, err := o.complete()
	if err != nil {
		return err
	}
	objs, err := gpuview.List(ctx, client, o.cfg)
	if err != nil {
		return err
	}
	v := gpuview.Build(objs, o.cfg, o.deps.clock.Now())
	return o.print(&v, func(w io.Writer) error { return gpuview.WriteTable(w, &v) })
}

func (o *options) runWhy(ctx context.Context, name string) error {
	client, err := o.complete()
	if err != nil {
		return err
	}
	ns, _, err := o.kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	objs, err := gpuview.List(ctx, client, o.cfg)
	if err != nil {
		return err
	}
	events, err := gpuview.PodEvents(ctx, client, pod)
	if err != nil {
		return err
	}
	e := gpuview.Explain(pod, objs, events, o.cfg, o.deps.clock.Now())
	return o.print(&e, func(w io.Writer) error { return gpuview.WriteExplanation(w, &e) })
}

// print writes v as JSON or YAML (sigs.k8s.io/yaml, from the same JSON tags), or by table.
func (o *options) print(v any, table func(io.Writer) error) error {
	switch o.output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(o.streams.Out, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(b)
		return err
	}
	return table(o.streams.Out)
}
