// Command nvml-probe checks hami-go's NVML backend on a real GPU node: it opens the driver's
// NVML (pkg/nvml.Open), prints the discovered GPUs, a probe result and the compute processes
// of each GPU, and the XID events seen while watching for a while, as one JSON document on
// stdout; over the real NVML it also reports the driver and CUDA versions and each GPU's compute
// capability (hack/gpu-check compares them with nvidia-smi). It exits 1 when anything fails (no
// driver, discovery, no GPUs, a probe, a process query, the XID watch, a version query). With
// --fake it runs the same code over a pkg/fake fleet instead (no versions).
//
//	go run ./hack/nvml-probe                   # real NVML, watch XIDs for 2s
//	go run ./hack/nvml-probe --watch=10s -v=4
//	go run ./hack/nvml-probe --fake=dgxh100 --fake-inject-xid=79
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/fake"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// config is what the flags set.
type config struct {
	// Watch is how long to watch XID events.
	Watch time.Duration
	// FakeProfile, when set, runs over a pkg/fake fleet of this profile instead of real NVML.
	FakeProfile string
	// FakeNode is the fake fleet's node name (its UUIDs depend on it).
	FakeNode string
	// FakeInjectXID, when not 0, is injected on the fake fleet's first GPU while watching.
	FakeInjectXID uint64
}

// report is the JSON document printed on stdout.
type report struct {
	Backend   string                            `json:"backend"`
	GPUs      []device.GPU                      `json:"gpus"`
	Probes    map[string]string                 `json:"probes"`
	Processes map[string][]device.ProcessMemory `json:"processes"`
	// ProcessErrors holds the UUIDs whose process query failed, with the error.
	ProcessErrors map[string]string `json:"processErrors,omitempty"`
	WatchSeconds  float64           `json:"watchSeconds"`
	XIDs          []device.XIDEvent `json:"xids"`
	WatchError    string            `json:"watchError,omitempty"`
	// Versions are the driver, CUDA and compute-capability versions (real NVML only).
	Versions *versions `json:"versions,omitempty"`
	// Failures lists everything that went wrong; empty means success.
	Failures []string `json:"failures"`
	// Minors are the GPUs' minor numbers by UUID (device.GPU.Minor, which device.GPU's JSON
	// leaves out): hack/gpu-check compares them with the driver's and /dev/nvidia<minor>.
	Minors map[string]int `json:"minors"`
}

func main() {
	klog.InitFlags(nil)
	var cfg config
	flag.DurationVar(&cfg.Watch, "watch", 2*time.Second, "how long to watch XID events")
	flag.StringVar(&cfg.FakeProfile, "fake", "", "run over a pkg/fake fleet of this profile (e.g. dgxh100) instead of the real NVML")
	flag.StringVar(&cfg.FakeNode, "fake-node", "nvml-probe", "node name of the fake fleet")
	flag.Uint64Var(&cfg.FakeInjectXID, "fake-inject-xid", 0, "with --fake: inject this XID on GPU 0 while watching (0 = none)")
	flag.Parse()
	defer klog.Flush()
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nvml-probe:", err)
		klog.Flush()
		os.Exit(1)
	}
}

// run opens the backend cfg names, checks it, writes the report to w and returns an error
// when anything failed.
func run(ctx context.Context, cfg config, w io.Writer) error {
	b, closer, fleet, err := open(cfg)
	if err != nil {
		return err
	}
	defer closer()
	rep := check(ctx, cfg, b, fleet)
	if fleet == nil && len(rep.GPUs) > 0 {
		addVersions(&rep, gonvml.New())
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if len(rep.Failures) > 0 {
		return fmt.Errorf("%d check(s) failed, first: %s", len(rep.Failures), rep.Failures[0])
	}
	return nil
}

// addVersions initializes lib (a second NVML reference; nvmlInit counts them), reads the
// versions of rep's GPUs into rep and shuts lib down; failures are added to rep.Failures.
func addVersions(rep *report, lib gonvml.Interface) {
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		rep.Failures = append(rep.Failures, "nvmlInit for versions: "+ret.Error())
		return
	}
	defer lib.Shutdown()
	uuids := make([]string, len(rep.GPUs))
	for i, g := range rep.GPUs {
		uuids[i] = g.UUID
	}
	v := readVersions(lib, uuids)
	rep.Versions = &v
	rep.Failures = append(rep.Failures, v.Errors...)
}

// open returns the real NVML backend, or a fake fleet's backend and the fleet.
func open(cfg config) (device.Backend, func(), *fake.Fleet, error) {
	if cfg.FakeProfile == "" {
		b, closer, err := nvml.Open()
		return b, closer, nil, err
	}
	p, err := fake.ParseProfile(cfg.FakeProfile)
	if err != nil {
		return nil, nil, nil, err
	}
	f, err := fake.New(cfg.FakeNode, p)
	if err != nil {
		return nil, nil, nil, err
	}
	return nvml.NewBackend(f.Library(), nvml.Options{Name: "fake"}), func() {}, f, nil
}

// check runs discovery, probes, process queries and the XID watch, collecting failures.
func check(ctx context.Context, cfg config, b device.Backend, fleet *fake.Fleet) report {
	rep := report{
		Backend:      b.Name(),
		Probes:       map[string]string{},
		Processes:    map[string][]device.ProcessMemory{},
		WatchSeconds: cfg.Watch.Seconds(),
		XIDs:         []device.XIDEvent{},
		Failures:     []string{},
	}
	fail := func(format string, args ...any) { rep.Failures = append(rep.Failures, fmt.Sprintf(format, args...)) }
	gpus, err := b.Discover()
	if err != nil {
		fail("discover: %v", err)
		return rep
	}
	rep.GPUs = gpus
	rep.Minors = map[string]int{}
	for _, g := range gpus {
		rep.Minors[g.UUID] = g.Minor
	}
	if len(gpus) == 0 {
		fail("discover: no GPUs found")
		return rep
	}
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
		if err := b.Probe(g.UUID); err != nil {
			rep.Probes[g.UUID] = err.Error()
			fail("probe %s: %v", g.UUID, err)
		} else {
			rep.Probes[g.UUID] = "ok"
		}
		ps, err := b.Processes(g.UUID)
		if err != nil {
			if rep.ProcessErrors == nil {
				rep.ProcessErrors = map[string]string{}
			}
			rep.ProcessErrors[g.UUID] = err.Error()
			fail("processes %s: %v", g.UUID, err)
			continue
		}
		rep.Processes[g.UUID] = ps
	}

	wctx, cancel := context.WithTimeout(ctx, cfg.Watch)
	defer cancel()
	out := make(chan device.XIDEvent, 64)
	done := make(chan error, 1)
	go func() { done <- b.WatchXIDs(wctx, uuids, out) }()
	seen := make(chan struct{})
	if fleet != nil && cfg.FakeInjectXID != 0 {
		go injectUntilSeen(wctx, fleet, uuids[0], cfg.FakeInjectXID, seen)
	}
	var werr error
	for finished := false; !finished; {
		select {
		case ev := <-out:
			if len(rep.XIDs) == 0 {
				close(seen)
			}
			rep.XIDs = append(rep.XIDs, ev)
		case werr = <-done:
			finished = true
		}
	}
	for len(out) > 0 {
		rep.XIDs = append(rep.XIDs, <-out)
	}
	if werr != nil && !errors.Is(werr, context.DeadlineExceeded) {
		rep.WatchError = werr.Error()
		fail("watch XIDs: %v", werr)
	}
	return rep
}

// injectUntilSeen injects xid on the fake GPU every 200ms until seen is closed (the first event
// came back) or ctx ends: the watcher registers asynchronously, so an early injection may miss.
func injectUntilSeen(ctx context.Context, f *fake.Fleet, uuid string, xid uint64, seen <-chan struct{}) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-seen:
			return
		case <-t.C:
			if err := f.InjectXID(uuid, xid); err != nil {
				klog.ErrorS(err, "Injecting fake XID")
				return
			}
		}
	}
}
