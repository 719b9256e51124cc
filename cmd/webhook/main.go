// Command webhook is hami-go's mutating admission webhook: GPU pod defaults, validation and
// scheduler routing, and Ray GPU figures for KubeRay pods and RayClusters (pkg/webhook).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/hami-go/hami-go/pkg/drapreempt"
	"github.com/hami-go/hami-go/pkg/webhook"
)

func main() {
	fs := pflag.NewFlagSet("webhook", pflag.ExitOnError)
	opts, err := parseFlags(fs, os.Args[1:], os.Getenv)
	if err != nil {
		klog.ErrorS(err, "Invalid flags")
		os.Exit(2)
	}
	cfg := opts.ServerConfig
	ctrllog.SetLogger(klog.NewKlogr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	{ // both modes: ResourceQuotas (GPU-memory quota); DRA mode: templates and ResourceSlices
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			klog.ErrorS(err, "API client", "kubeconfig", cfg.Kubeconfig)
			os.Exit(1)
		}
		if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
			klog.ErrorS(err, "API client")
			os.Exit(1)
		}
	}
	s, err := webhook.NewServer(cfg)
	if err != nil {
		klog.ErrorS(err, "Cannot start")
		os.Exit(1)
	}
	if opts.HAMiQuotaKeys { // on the quota informer Start starts
		go func() {
			if err := s.RunHAMiQuotaKeys(ctx); err != nil {
				klog.ErrorS(err, "HAMi quota keys: the controller stopped; quotas written with HAMi's keys are not enforced")
			}
		}()
	}
	if opts.DRAPreemption { // one replica preempts, by a Lease
		go func() {
			if err := drapreempt.Run(ctx, cfg.Client, cfg.Admission.Namespace, drapreempt.Config{}); err != nil {
				klog.ErrorS(err, "DRA preemption: the controller stopped; pods with claims are not preempted for")
			}
		}()
	}
	if err := s.Start(ctx); err != nil {
		klog.ErrorS(err, "Webhook server failed")
		os.Exit(1)
	}
}
