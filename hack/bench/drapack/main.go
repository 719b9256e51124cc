// Command drapack measures how DRA mode packs GPU slices under concurrency (issue 25 item 4,
// docs/dra.md "Packing under concurrency"): bursts of identical sliced pods, all created at once,
// against the real kube-scheduler, and how many GPUs each burst's claims touch against the fewest
// they fit on.
//
// It needs a control plane of its own (hack/dra-repro/controlplane.sh: kube-apiserver,
// kube-scheduler, kube-controller-manager's resourceclaim controller; no kubelet), given by
// --kubeconfig. On --nodes simulated nodes it runs hami-go's real DRA driver (pkg/dra over the
// fake backend's --profile, each --device-order in turn) publishing through the kubeletplugin
// helper's ResourceSlice controller, and a stand-in for the kubelet that prepares a bound pod's
// claims --prepare-lag after the binding (so binpack and spread republish as on a node). The pods
// are what hami-go's webhook makes of `nvidia.com/gpu: 1, nvidia.com/gpumem: <--gpumem>`: a claim
// from a ResourceClaimTemplate of DeviceClass gpu.hami-go.io asking that memory, and the
// synthetic hami-go.io/gpu-memory request. Each --schedulers entry is a kube-scheduler profile the
// pods name (default-scheduler: kube-scheduler's defaults).
//
// Output: JSON of every burst (--out) and a Markdown section (--md) for docs/bench/report.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// Config is the whole configuration of a run (flags).
type Config struct {
	// Kubeconfig is the private control plane's kubeconfig.
	Kubeconfig string
	// Profile is the fake backend's profile of every node (pkg/fake; dgxh100: 8 x 81920 MiB).
	Profile string
	// SplitCount is the drivers' --split-count (the sharers capacity).
	SplitCount int
	// Nodes are the cluster sizes, nodes; Pods the burst sizes, pods.
	Nodes, Pods []int
	// Bursts is the number of bursts of each size per variant.
	Bursts int
	// GPUMemMiB is each pod's GPU memory, MiB.
	GPUMemMiB int64
	// Orders are the device orders measured.
	Orders []dra.DeviceOrder
	// Schedulers are the kube-scheduler profiles measured.
	Schedulers []string
	// PrepareLag is the time from a pod's binding to its claims' prepare (the kubelet's part).
	PrepareLag time.Duration
	// RepublishDelay is the drivers' --republish-delay.
	RepublishDelay time.Duration
	// BurstTimeout bounds the wait for a burst's pods to be bound; pods unbound then are refused.
	BurstTimeout time.Duration
	// Namespace holds the pods.
	Namespace string
	// Out (JSON), Md (Markdown) and WorkDir (the drivers' files).
	Out, Md, WorkDir string
}

// Result is the JSON output.
type Result struct {
	Config   Config    `json:"config"`
	Started  time.Time `json:"started"`
	Variants []Variant `json:"variants"`
}

func main() {
	cfg := Config{}
	fs := pflag.NewFlagSet("drapack", pflag.ExitOnError)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "/tmp/hami-go-dra-repro/kubeconfig", "kubeconfig of a private control plane (hack/dra-repro/controlplane.sh)")
	fs.StringVar(&cfg.Profile, "profile", "dgxh100", "fake backend profile of every node")
	fs.IntVar(&cfg.SplitCount, "split-count", 10, "the drivers' --split-count")
	nodes := fs.String("nodes", "1,4", "cluster sizes (nodes), comma-separated")
	pods := fs.String("pods", "4,8", "burst sizes (pods), comma-separated")
	fs.IntVar(&cfg.Bursts, "bursts", 20, "bursts of each size per variant")
	fs.Int64Var(&cfg.GPUMemMiB, "gpumem", 20000, "GPU memory of each pod, MiB")
	orders := fs.String("orders", "index,binpack,spread", "device orders")
	scheds := fs.String("schedulers", "default-scheduler", "kube-scheduler profiles the pods name")
	fs.DurationVar(&cfg.PrepareLag, "prepare-lag", 500*time.Millisecond, "binding to prepare (the kubelet's part)")
	fs.DurationVar(&cfg.RepublishDelay, "republish-delay", time.Second, "the drivers' --republish-delay")
	fs.DurationVar(&cfg.BurstTimeout, "burst-timeout", 30*time.Second, "longest wait for a burst's pods to be bound")
	fs.StringVar(&cfg.Namespace, "namespace", "drapack", "namespace of the pods")
	fs.StringVar(&cfg.Out, "out", "_output/bench/drapack.json", "JSON result")
	fs.StringVar(&cfg.Md, "md", "_output/bench/drapack.md", "Markdown section")
	fs.StringVar(&cfg.WorkDir, "work-dir", "_output/bench/drapack", "the drivers' CDI specs and checkpoints")
	klog.InitFlags(nil)
	fs.AddGoFlagSet(flag.CommandLine)
	_ = fs.Parse(os.Args[1:])
	var err error
	if cfg.Nodes, err = ints("--nodes", *nodes); err == nil {
		cfg.Pods, err = ints("--pods", *pods)
	}
	for _, s := range strings.Split(*orders, ",") {
		o, perr := dra.ParseDeviceOrder("--orders", strings.TrimSpace(s))
		if perr != nil {
			err = perr
		}
		cfg.Orders = append(cfg.Orders, o)
	}
	cfg.Schedulers = strings.Split(*scheds, ",")
	if err == nil && (cfg.Bursts < 1 || cfg.GPUMemMiB < 1 || cfg.SplitCount < 1) {
		err = fmt.Errorf("--bursts, --gpumem and --split-count must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "drapack:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, cfg)
	if res != nil {
		if werr := write(cfg, res); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "drapack:", err)
		os.Exit(1)
	}
}

func ints(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a list of positive numbers", flag, s)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, cfg Config) (*Result, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	if err := setup(ctx, cs, cfg); err != nil {
		return nil, err
	}
	w, err := startPodWatch(ctx, cs, cfg.Namespace, cfg.PrepareLag)
	if err != nil {
		return nil, err
	}
	res := &Result{Config: cfg, Started: time.Now().UTC()}
	for _, o := range cfg.Orders {
		vs, err := runOrder(ctx, cs, cfg, w, o)
		res.Variants = append(res.Variants, vs...)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// setup creates the namespace, the chart's DeviceClass gpu.hami-go.io and the claim template.
func setup(ctx context.Context, cs kubernetes.Interface, cfg Config) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cfg.Namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// The serviceaccount controller makes "default"; pods are refused until it exists.
	for i := 0; ; i++ {
		if _, err := cs.CoreV1().ServiceAccounts(cfg.Namespace).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			break
		} else if i > 100 {
			return fmt.Errorf("no ServiceAccount default in %s (kube-controller-manager's serviceaccount controller): %w", cfg.Namespace, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: draapi.DriverName, Labels: map[string]string{benchLabel: "true"}},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", draapi.DriverName)}}}},
	}
	if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// an interrupted run's pods and ResourceSlices
	if err := cs.CoreV1().Pods(cfg.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := deleteSlices(ctx, cs); err != nil {
		return err
	}
	_ = cs.ResourceV1().ResourceClaimTemplates(cfg.Namespace).Delete(ctx, templateName, metav1.DeleteOptions{})
	_, err := cs.ResourceV1().ResourceClaimTemplates(cfg.Namespace).Create(ctx, claimTemplate(cfg.Namespace, cfg.GPUMemMiB), metav1.CreateOptions{})
	return err
}

func write(cfg Config, res *Result) error {
	for _, p := range []string{cfg.Out, cfg.Md} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(cfg.Out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	md := Markdown(res)
	fmt.Print(md)
	return os.WriteFile(cfg.Md, []byte(md), 0o644)
}
