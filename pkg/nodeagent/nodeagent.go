// Package nodeagent is what both node agents (cmd/device-plugin, cmd/dra-driver) share: their
// common configuration (Config, embedded by deviceplugin.Config and dra.Config) and its flags
// (AddFlags), the agent's life written once (Life, over the Agent each implements: install,
// serve, wait for the old mode, publish, decide, hand over, drain, flush, withdraw), and the
// start-up wiring: the signal context, the API client from --kubeconfig, the GPU backend from
// --backend (NVML, or a pkg/fake fleet picked by the node's profile label) and the metrics and
// fault-injection HTTP handler.
package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/fake"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// Main runs run with a context cancelled by SIGINT/SIGTERM, after parse succeeded on args (the
// command line after the program name), and returns the process's exit status (cmd's main
// exits with it): 2 with "<name>: <error>" on stderr on a parse error, 1 (the error
// logged) when run fails, 0 otherwise. The uninstall command is dispatched by cmd's main
// (UninstallCommand, UninstallMain).
func Main[O any](name string, args []string, parse func([]string, func(string) string) (O, error), run func(context.Context, O) error) int {
	o, err := parse(args, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o)
	stop()
	if err != nil {
		klog.ErrorS(err, name+" failed")
		klog.Flush()
		return 1
	}
	return 0
}

// Client builds the API client from --kubeconfig ("" = in-cluster); tune, when not nil, may
// change the rest config first (rate limits). Errors name --kubeconfig.
func Client(kubeconfig string, tune func(*rest.Config)) (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", kubeconfig, err)
	}
	if tune != nil {
		tune(rc)
	}
	return kubernetes.NewForConfig(rc)
}

// Backend is an opened GPU backend.
type Backend struct {
	// Backend sees the GPUs.
	device.Backend
	// Fleet is the fake fleet (fault injection); nil on NVML.
	Fleet *fake.Fleet
	// Close releases NVML; a no-op for the fake fleet.
	Close func()
}

// OpenBackend opens the backend f.Backend names: the driver's NVML, or the fake fleet of
// f.FakeProfileSpec of node name's labels (read through client). Errors name the node and
// label, or the profile.
func OpenBackend(ctx context.Context, client kubernetes.Interface, f *Flags, name string) (Backend, error) {
	if f.Backend != BackendFake {
		b, closer, err := nvml.OpenLibrary(f.NVMLLibrary, nvml.Options{PCIDevicesDir: nvml.DefaultPCIDevicesDir})
		if err != nil {
			return Backend{}, err
		}
		return Backend{Backend: b, Close: closer}, nil
	}
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Backend{}, fmt.Errorf("node %s (for its %s label): %w", name, f.FakeProfileLabel, err)
	}
	spec := f.FakeProfileSpec(node.Labels)
	prof, err := fake.ParseProfile(spec)
	if err != nil {
		return Backend{}, err
	}
	fleet, err := fake.New(name, prof)
	if err != nil {
		return Backend{}, err
	}
	klog.InfoS("Fake GPU fleet", "node", name, "profile", spec, "gpus", len(fleet.UUIDs()))
	return Backend{Backend: nvml.NewBackend(fleet.Library(), nvml.Options{Name: "fake"}), Fleet: fleet, Close: func() {}}, nil
}
