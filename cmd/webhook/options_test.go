package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/webhook"
)

func parse(args []string, env map[string]string) (options, error) {
	return parseFlags(pflag.NewFlagSet("t", pflag.ContinueOnError), args, func(k string) string { return env[k] })
}

func TestDefaults(t *testing.T) {
	cfg, err := parse(nil, map[string]string{"POD_NAMESPACE": "hami-go-system"})
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Admission
	if cfg.Port != 9443 || cfg.CertDir != "/etc/hami-go/tls" || cfg.HealthAddress != ":8081" || cfg.MetricsAddress != ":8080" ||
		a.SchedulerName != "hami-go-scheduler" || a.Privileged != webhook.PrivilegedDeny || a.ResourceAnnotations != webhook.AnnotationDeny || a.Namespace != "hami-go-system" ||
		a.Ray.MemoryResource != "gpu_memory_mib" || a.Ray.AcceleratorLabel != "hami-go.io/accelerator-type" ||
		!reflect.DeepEqual(a.Ray.GPUResources, []string{"nvidia.com/gpu", "nvidia.com/mig-*"}) || a.Names.Memory != "nvidia.com/gpumem" ||
		a.Mode != webhook.ModeDevicePlugin || cfg.Kubeconfig != "" || a.DRASchedulerName != "" || a.GPUMemoryNodeAffinity || !cfg.HAMiQuotaKeys {
		t.Fatalf("defaults %+v", cfg)
	}
}

func TestEveryFlag(t *testing.T) {
	cfg, err := parse([]string{
		"--port=10443", "--cert-dir=/certs", "--health-address=127.0.0.1:9081", "--metrics-address=127.0.0.1:9080",
		"--scheduler-name=gpu-sched", "--privileged=ignore", "--resource-annotations=warn", "--namespace=ops",
		"--ray-gpu-resources=example.com/vgpu,nvidia.com/mig-*", "--ray-memory-resource=vram_mib", "--ray-accelerator-label=",
		"--resource-count=example.com/vgpu", "--resource-memory=example.com/vmem",
		"--resource-memory-percentage=example.com/vmem-pct", "--resource-cores=example.com/vcores",
		"--mode=dra", "--kubeconfig=/etc/kube.conf", "--dra-scheduler-name=hami-go-packed",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Admission
	want := []any{10443, "/certs", "127.0.0.1:9081", "127.0.0.1:9080", "gpu-sched", webhook.PrivilegedIgnore, webhook.AnnotationWarn, "ops",
		[]string{"example.com/vgpu", "nvidia.com/mig-*"}, "vram_mib", "", "example.com/vgpu", "example.com/vmem", "example.com/vmem-pct", "example.com/vcores", webhook.ModeDRA, "/etc/kube.conf", "hami-go-packed"}
	got := []any{cfg.Port, cfg.CertDir, cfg.HealthAddress, cfg.MetricsAddress, a.SchedulerName, a.Privileged, a.ResourceAnnotations, a.Namespace,
		a.Ray.GPUResources, a.Ray.MemoryResource, a.Ray.AcceleratorLabel, a.Names.Count, a.Names.Memory, a.Names.MemoryPercent, a.Names.Cores, a.Mode, cfg.Kubeconfig, a.DRASchedulerName}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
}

// --gpu-memory-node-affinity reaches the admission config (mode deviceplugin; TestEveryFlag runs dra).
func TestGPUMemoryNodeAffinityFlag(t *testing.T) {
	cfg, err := parse([]string{"--gpu-memory-node-affinity"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Admission.GPUMemoryNodeAffinity {
		t.Fatal("--gpu-memory-node-affinity: GPUMemoryNodeAffinity false")
	}
}

// --hami-quota-keys (on by default, TestDefaults) turns the HAMi quota controller off.
func TestHAMiQuotaKeysFlag(t *testing.T) {
	for args, want := range map[string]bool{"--hami-quota-keys=false": false, "--hami-quota-keys": true, "--hami-quota-keys=true": true} {
		cfg, err := parse([]string{args}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HAMiQuotaKeys != want {
			t.Errorf("%s: HAMiQuotaKeys %v", args, cfg.HAMiQuotaKeys)
		}
	}
}

// The Ray GPU list follows --resource-count unless given.
func TestRayGPUResourcesFollowCount(t *testing.T) {
	cfg, err := parse([]string{"--resource-count=example.com/vgpu"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Admission.Ray.GPUResources; !reflect.DeepEqual(got, []string{"example.com/vgpu", "nvidia.com/mig-*"}) {
		t.Fatalf("GPUResources %q", got)
	}
}

func TestBadFlags(t *testing.T) {
	for args, want := range map[string]string{
		"--privileged=allow":                     `privileged: "allow" is not deny or ignore`,
		"--mode=both":                            `mode: "both" is not deviceplugin or dra`,
		"--resource-annotations=ignore":          `resource annotations: "ignore" is not deny or warn`,
		"--port=70000":                           "--port: 70000 is not a TCP port",
		"--health-address=8081":                  `--health-address: "8081" is not host:port`,
		"--metrics-address=:http":                `--metrics-address: ":http" has no numeric port`,
		"--ray-gpu-resources=nvidia.com/gpumem":  `"nvidia.com/gpumem" matches nvidia.com/gpumem, which is not a GPU count`,
		"--resource-memory=nvidia.com/gpu":       "are both",
		"--scheduler-name=":                      "scheduler name is empty",
		"--dra-scheduler-name=packed":            `dra scheduler name: "packed" is set with mode "deviceplugin"; it is for mode dra`,
		"--mode=dra --dra-scheduler-name=Packed": `dra scheduler name: "Packed" is not a scheduler name`,
		"--cert-dir=":                            "--cert-dir is empty",
		"--mode=dra --gpu-memory-node-affinity":  `gpu memory node affinity: true with mode "dra"; it is for mode deviceplugin`,
		"--ray-accelerator-label=bad/key/x":      "not a label key",
		"--dra-preemption":                       "--dra-preemption=true needs --mode=dra",
		"extra":                                  "unexpected arguments",
	} {
		if _, err := parse(strings.Fields(args), nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", args, err, want)
		}
	}
}

// klog's flags come with parseFlags (cliflags.Parse), so a flag set without them accepts -v.
func TestKlogFlags(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	if _, err := parseFlags(fs, []string{"-v=2"}, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if v := fs.Lookup("v"); v == nil || v.Value.String() != "2" {
		t.Fatalf("-v: %v, want 2", v)
	}
	if _, err := parse([]string{"-v=0"}, nil); err != nil {
		t.Fatal(err)
	}
}
