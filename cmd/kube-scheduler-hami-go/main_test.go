package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
	"github.com/hami-go/hami-go/pkg/schedplugin"
)

// TestPluginRegistered: the registry the command's option builds holds HamiGo, and registering it
// again is refused (the option is what newCommand passes).
func TestPluginRegistered(t *testing.T) {
	r := runtime.Registry{}
	if err := app.WithPlugin(schedplugin.Name, schedplugin.New)(r); err != nil {
		t.Fatal(err)
	}
	if r[schedplugin.Name] == nil {
		t.Fatalf("registry %v has no %s", r, schedplugin.Name)
	}
	if err := app.WithPlugin(schedplugin.Name, schedplugin.New)(r); err == nil {
		t.Fatal("a second registration was accepted")
	}
}

// TestCommand: the command is kube-scheduler's, with its flags.
func TestCommand(t *testing.T) {
	cmd := newCommand()
	if cmd.Use != "kube-scheduler" || cmd.Flags().Lookup("config") == nil || !strings.Contains(cmd.Long, "scheduler") {
		t.Fatalf("command %q: not kube-scheduler's (no --config flag)", cmd.Use)
	}
}

// TestArgsFromConfigFile: kube-scheduler's own config loading hands the plugin's args over as
// ConfigFromArgs expects (a *runtime.Unknown of JSON), values intact, and an unknown field
// still fails in the factory's decoding.
func TestArgsFromConfigFile(t *testing.T) {
	conf := func(args string) string {
		f := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(f, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: hami-go-scheduler
    plugins:
      bind:
        enabled:
          - name: HamiGo
    pluginConfig:
      - name: HamiGo
        args:
`+args), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	argsOf := func(f string) k8sruntime.Object {
		c, err := options.LoadConfigFromFile(klog.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, pc := range c.Profiles[0].PluginConfig {
			if pc.Name == schedplugin.Name {
				return pc.Args
			}
		}
		t.Fatalf("no %s pluginConfig in %+v", schedplugin.Name, c.Profiles[0].PluginConfig)
		return nil
	}
	cfg, err := schedplugin.ConfigFromArgs(argsOf(conf("          nodePolicy: spread\n          inventoryStaleAfter: 2m\n          preemption: none\n")))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodePolicy != device.Spread || cfg.StaleAfter != 2*time.Minute || cfg.Preemption != extender.PreemptionNone || cfg.GPUPolicy != device.Binpack {
		t.Fatalf("config %+v", cfg)
	}
	if _, err := schedplugin.ConfigFromArgs(argsOf(conf("          nodepolicy: spread\n          bogus: 1\n"))); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("unknown field: %v", err)
	}
}
