package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/hack/bench/e2eresult"
)

// The plugins variant (issue 38 item 4): kube-scheduler built with hami-go's framework plugin
// HamiGo (cmd/kube-scheduler-hami-go, pkg/schedplugin), no extender, for the extender variant's
// pods. It measures what the extender's HTTP protocol costs per pod against the same placement
// in-process.

// PluginsScheduler is the profile of the plugins variant's kube-scheduler.
const PluginsScheduler = "hami-go-bench-plugins"

// pluginsModule is the Go module of the plugin-built kube-scheduler, relative to the repository.
const pluginsModule = "cmd/kube-scheduler-hami-go"

// pluginsProfile is the plugins profile's plugins and pluginConfig (YAML under a profile, indented
// four spaces): HamiGo at every extension point it implements, its args naming the profile, and
// NodeResourcesFit replaced by the build's HamiGoNodeResourcesFit (cmd/kube-scheduler-hami-go
// nodefit) ignoring the HAMi resources the nodes do not advertise (the extender's
// managedResources ignoredByScheduler). A plugin enabled at one extension point runs after the
// multiPoint defaults there (kube-scheduler's expandMultiPointPlugins), so at postFilter and bind
// the default is disabled and enabled again after HamiGo: its PostFilter runs before
// DefaultPreemption, its Bind before DefaultBinder (which would bind every pod without the
// plan), as the chart's profile does (charts/hami-go/templates/_helpers.tpl).
func pluginsProfile() string {
	var b strings.Builder
	b.WriteString("    plugins:\n      multiPoint:\n        enabled:\n          - name: HamiGoNodeResourcesFit\n            weight: 1\n" +
		"        disabled:\n          - name: NodeResourcesFit\n")
	after := map[string]string{"postFilter": "DefaultPreemption", "bind": "DefaultBinder"}
	for _, ep := range []string{"preFilter", "filter", "postFilter", "preScore", "score", "reserve", "bind"} {
		fmt.Fprintf(&b, "      %s:\n", ep)
		if d := after[ep]; d != "" {
			fmt.Fprintf(&b, "        disabled:\n          - name: %s\n", d)
		}
		fmt.Fprintf(&b, "        enabled:\n          - name: HamiGo\n")
		if d := after[ep]; d != "" {
			fmt.Fprintf(&b, "          - name: %s\n", d)
		}
	}
	fmt.Fprintf(&b, `    pluginConfig:
      - name: HamiGo
        args:
          schedulerName: %s
      - name: HamiGoNodeResourcesFit
        args:
          ignoredResources:
            - nvidia.com/gpumem
            - nvidia.com/gpumem-percentage
            - nvidia.com/gpucores
`, PluginsScheduler)
	return b.String()
}

// preparePlugins readies the plugins variant: cfg.KubeSchedulerPlugins when set (it must exist),
// else the binary built from the repository into cfg.WorkDir; and the kubeconfig it runs with
// (pluginsKubeconfig). With an error the caller skips the variant.
func preparePlugins(ctx context.Context, cfg *Config) error {
	if cfg.KubeSchedulerPlugins != "" {
		if _, err := os.Stat(cfg.KubeSchedulerPlugins); err != nil {
			return fmt.Errorf("--kube-scheduler-plugins: %w", err)
		}
	} else {
		bin, err := buildPluginsScheduler(ctx, cfg.WorkDir)
		if err != nil {
			return err
		}
		cfg.KubeSchedulerPlugins = bin
	}
	kc, err := pluginsKubeconfig(cfg)
	if err != nil {
		return err
	}
	cfg.pluginsKubeconfig = kc
	return nil
}

// buildPluginsScheduler builds cmd/kube-scheduler-hami-go (found above the working directory)
// into workDir/kube-scheduler-hami-go and returns its absolute path. A few minutes the first
// time (k8s.io/kubernetes), seconds with a warm build cache.
func buildPluginsScheduler(ctx context.Context, workDir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	out, err := filepath.Abs(filepath.Join(workDir, "kube-scheduler-hami-go"))
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", err
	}
	klog.InfoS("Building the plugin kube-scheduler", "module", filepath.Join(root, pluginsModule), "out", out)
	cmd := exec.CommandContext(ctx, "go", "build", "-C", filepath.Join(root, pluginsModule), "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w: %s", pluginsModule, err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// repoRoot is the nearest directory at or above the working directory that holds pluginsModule.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, pluginsModule, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no %s above the working directory (give --kube-scheduler-plugins)", pluginsModule)
		}
		dir = up
	}
}

// pluginsKubeconfig is the kubeconfig of the plugins variant's kube-scheduler: cfg.Kubeconfig,
// or with --extender-as a copy of it in cfg.WorkDir whose users impersonate that user (its
// Binding carries hami-go.io/allocation-planned, which the chart's allocation-records policy
// lets only hami-go's scheduler ServiceAccount write, as the extender variant's client does).
func pluginsKubeconfig(cfg *Config) (string, error) {
	if cfg.ExtenderAs == "" {
		return cfg.Kubeconfig, nil
	}
	kc, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("--kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	for _, u := range kc.AuthInfos {
		u.Impersonate = cfg.ExtenderAs
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return "", err
	}
	path, err := filepath.Abs(filepath.Join(cfg.WorkDir, PluginsScheduler+".kubeconfig"))
	if err != nil {
		return "", err
	}
	return path, clientcmd.WriteToFile(*kc, path)
}

// logPluginsRatio prints the plugins variant's pods/s and its ratio to the baseline's, and the
// extender's, run by run (complete runs only).
func logPluginsRatio(res *Result) {
	for _, v := range []string{e2eresult.VariantPlugins, e2eresult.VariantExtender} {
		runs, nums, dens, ratios := res.Ratio(v, e2eresult.VariantBaseline)
		for i := range runs {
			klog.InfoS("Throughput against the baseline", "variant", v, "run", runs[i],
				"podsPerSecond", fmt.Sprintf("%.1f", nums[i]), "baseline", fmt.Sprintf("%.1f", dens[i]), "ratio", fmt.Sprintf("%.2f", ratios[i]))
		}
	}
}
