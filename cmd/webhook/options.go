package main

import (
	"fmt"
	"net"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/cliflags"
	"github.com/hami-go/hami-go/pkg/webhook"
)

// options is the command line: the server's configuration and what runs beside the server.
type options struct {
	webhook.ServerConfig
	// HAMiQuotaKeys runs the HAMi quota controller (webhook.HAMiQuotaController): each
	// ResourceQuota written with HAMi's keys limits./limit.<memory|cores name> gets an owned
	// sibling on requests.hami-go.io/gpu-memory and gpu-cores (docs/quota.md).
	HAMiQuotaKeys bool
	// DRAPreemption runs the DRA-mode preemption controller (pkg/drapreempt; --mode=dra only):
	// kube-scheduler 1.37 does not preempt for pods with claims, and the extender, which
	// preempts in device-plugin mode, does not run in DRA mode.
	DRAPreemption bool
}

// parseFlags turns the command line (docs/components.md, "webhook") into the server's
// configuration. getenv supplies POD_NAMESPACE, the default of --namespace. fs receives the
// flags, klog's included (cliflags.Parse adds those fs does not have yet).
func parseFlags(fs *pflag.FlagSet, args []string, getenv func(string) string) (options, error) {
	o := options{ServerConfig: webhook.ServerConfig{Admission: webhook.DefaultConfig()}}
	cfg := &o.ServerConfig
	a := &cfg.Admission
	fs.IntVar(&cfg.Port, "port", 9443, "TLS port of /mutate-pods and /mutate-rayclusters")
	fs.StringVar(&cfg.CertDir, "cert-dir", "/etc/hami-go/tls", "directory of tls.crt and tls.key; reloaded when they change")
	fs.StringVar(&cfg.HealthAddress, "health-address", ":8081", "address of /healthz and /readyz (plain HTTP)")
	fs.StringVar(&cfg.MetricsAddress, "metrics-address", ":8080", "address of /metrics (plain HTTP)")
	fs.StringVar(&a.SchedulerName, "scheduler-name", a.SchedulerName, "scheduler set on GPU pods that use default-scheduler (case C27)")
	privileged := fs.String("privileged", string(a.Privileged), "GPU pods with a privileged container: deny, or ignore (admit untouched) (case C25)")
	annotations := fs.String("resource-annotations", string(a.ResourceAnnotations), "pods that write a GPU resource name (e.g. nvidia.com/gpumem) as an annotation: deny, or warn (admit with a warning) (case C39)")
	fs.StringVar(&a.Namespace, "namespace", getenv("POD_NAMESPACE"), "the webhook's own namespace, whose pods and RayClusters are admitted untouched (default $POD_NAMESPACE)")
	rayGPU := fs.StringSlice("ray-gpu-resources", nil, "resource names whose limits count as GPUs for Ray, in priority order; name* matches a prefix (default: --resource-count,nvidia.com/mig-*) (case C32)")
	fs.StringVar(&a.Ray.MemoryResource, "ray-memory-resource", a.Ray.MemoryResource, "Ray custom resource carrying the container's GPU memory, integer MiB (empty: none)")
	fs.StringVar(&a.Ray.AcceleratorLabel, "ray-accelerator-label", a.Ray.AcceleratorLabel, "Ray node label carrying the GPU model (empty: none; Ray < 2.49 has no string --labels)")
	mode := fs.String("mode", string(a.Mode), "deviceplugin (GPU limits stay extended resources for hami-go's device plugin and extender) or dra (GPU limits become ResourceClaims for the DeviceClass gpu.hami-go.io; docs/dra.md)")
	fs.StringVar(&a.DRASchedulerName, "dra-scheduler-name", "", "--mode=dra: scheduler profile set on GPU pods that use default-scheduler, e.g. one scoring hami-go.io/gpu-memory with MostAllocated (docs/dra.md, \"Packing under concurrency\"); empty = keep the pod's scheduler")
	fs.BoolVar(&a.GPUMemoryNodeAffinity, "gpu-memory-node-affinity", false, "--mode=deviceplugin: add to a GPU pod asking MiB per GPU a required node affinity nvidia.com/gpu.memory > MiB-1, so that autoscalers pick node groups whose cards can hold it (docs/design.md, \"GPU memory as a synthetic extended resource\")")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "path of a kubeconfig for the API client (ResourceQuotas in both modes; templates and ResourceSlices in --mode=dra); empty = in-cluster configuration")
	fs.BoolVar(&o.HAMiQuotaKeys, "hami-quota-keys", true, "keep, for each ResourceQuota with HAMi's keys limits.<--resource-memory> / limit.<--resource-memory> and limits.<--resource-cores> / limit.<--resource-cores>, an owned sibling ResourceQuota <name>-hami-go on requests.hami-go.io/gpu-memory and requests.hami-go.io/gpu-cores, which the API server enforces (RBAC: create/update/delete resourcequotas, create events)")
	fs.BoolVar(&o.DRAPreemption, "dra-preemption", false, "--mode=dra: preempt for pending pods whose claims of gpu.hami-go.io fit no node (kube-scheduler 1.37 does not): nominate the pod to the node where the fewest lowest-priority pods free enough GPU capacity, and evict those through the Eviction API; one replica at a time, by the Lease hami-go-dra-preemption in --namespace (RBAC: pods list/watch, pods/status patch, pods/eviction create, resourceclaims, resourceslices, poddisruptionbudgets list/watch, leases, events; docs/dra.md, \"Preemption in DRA mode\")")
	cliflags.AddResourceNames(fs, &a.Names)
	if err := cliflags.Parse(fs, args); err != nil {
		return o, err
	}
	a.Mode = webhook.Mode(*mode)
	a.Privileged = webhook.PrivilegedPolicy(*privileged)
	a.ResourceAnnotations = webhook.AnnotationPolicy(*annotations)
	if fs.Changed("ray-gpu-resources") {
		a.Ray.GPUResources = *rayGPU
	} else {
		a.Ray.GPUResources = []string{a.Names.Count, "nvidia.com/mig-*"}
	}
	for _, f := range []struct{ name, v string }{{"health-address", cfg.HealthAddress}, {"metrics-address", cfg.MetricsAddress}} {
		if _, p, err := net.SplitHostPort(f.v); err != nil {
			return o, fmt.Errorf("--%s: %q is not host:port: %v", f.name, f.v, err)
		} else if _, err := strconv.Atoi(p); err != nil {
			return o, fmt.Errorf("--%s: %q has no numeric port", f.name, f.v)
		}
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return o, fmt.Errorf("--port: %d is not a TCP port", cfg.Port)
	}
	if cfg.CertDir == "" {
		return o, fmt.Errorf("--cert-dir is empty")
	}
	if o.DRAPreemption && a.Mode != webhook.ModeDRA {
		return o, fmt.Errorf("--dra-preemption=true needs --mode=dra (in mode deviceplugin the scheduler extender preempts)")
	}
	if o.DRAPreemption && a.Namespace == "" {
		return o, fmt.Errorf("--dra-preemption=true needs --namespace (or $POD_NAMESPACE) for its Lease")
	}
	if err := a.Validate(); err != nil {
		return o, err
	}
	return o, nil
}
