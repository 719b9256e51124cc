// Command placement measures what kube-scheduler's first-fit device allocator costs in GPU
// fragmentation (issue 14, docs/dra.md "Placement in DRA mode"): a seeded mixed workload is
// placed, in order, until the first pod that fits nowhere, (i) through the real structured
// allocator of k8s.io/dynamic-resource-allocation over the ResourceSlices hami-go's driver
// publishes (pkg/dra), with the devices in index order and in the driver's binpack order,
// and (ii) through hami-go's own allocator (pkg/allocator, binpack) on the same GPUs. No
// cluster is needed. It prints a Markdown section (also written to --out).
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/hami-go/hami-go/pkg/dra"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "placement:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	seeds   int
	nodes   []int
	gpus    int
	pods    int
	twoGPU  int
	split   int
	lag     int
	memMiB  int64
	outFile string
}

func parse(args []string) (options, error) {
	o := options{}
	fs := flag.NewFlagSet("placement", flag.ContinueOnError)
	fs.IntVar(&o.seeds, "seeds", 5, "number of workloads (seeds 1..N)")
	nodes := fs.String("nodes", "1,4", "comma-separated cluster sizes, nodes")
	fs.IntVar(&o.gpus, "gpus", 8, "GPUs per node")
	fs.Int64Var(&o.memMiB, "gpu-memory", 81920, "memory of each GPU, MiB (the fake dgxh100 fleet's H100 80 GB)")
	fs.IntVar(&o.pods, "pods", 3000, "pods per workload (more than ever fit)")
	fs.IntVar(&o.twoGPU, "two-gpu-percent", 15, "percent of pods that ask two GPUs")
	fs.IntVar(&o.split, "split-count", 10, "sharers per GPU (--split-count)")
	fs.IntVar(&o.lag, "lag", 10, "pods placed between two republishes in the lagged binpack-order run")
	fs.StringVar(&o.outFile, "out", "", "also write the Markdown section to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, s := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return o, fmt.Errorf("--nodes: %q is not a list of positive numbers", *nodes)
		}
		o.nodes = append(o.nodes, n)
	}
	if o.seeds < 1 || o.gpus < 1 || o.pods < 1 || o.split < 1 || o.lag < 1 || o.memMiB < 2 || o.twoGPU < 0 || o.twoGPU > 100 {
		return o, fmt.Errorf("--seeds, --gpus, --pods, --split-count, --lag must be positive, --gpu-memory at least 2, --two-gpu-percent 0..100")
	}
	return o, nil
}

// columns are the compared placements, in table order.
var columns = []string{"hami-go binpack (extender)", "DRA, index order (first-fit)", "DRA, binpack order", "DRA, binpack order, lag %d",
	"DRA, index order, nodes by GPU memory"}

// Row is one workload on one cluster size.
type Row struct {
	Nodes, Seed int
	Cells       []Result
}

func measure(ctx context.Context, o options) ([]Row, error) {
	var rows []Row
	for _, n := range o.nodes {
		f := NewFleet(n, o.gpus, o.memMiB, o.split)
		for s := 1; s <= o.seeds; s++ {
			pods := Workload(uint64(s), o.pods, o.twoGPU)
			rng := func() *rand.Rand { return rand.New(rand.NewPCG(uint64(s), 7)) }
			row := Row{Nodes: n, Seed: s, Cells: []Result{RunHAMi(f, pods, rng())}}
			for _, m := range []DRAMode{{dra.OrderIndex, 1, false}, {dra.OrderBinpack, 1, false}, {dra.OrderBinpack, o.lag, false}, {dra.OrderIndex, 1, true}} {
				r, err := RunDRA(ctx, f, pods, m, rng())
				if err != nil {
					return nil, err
				}
				row.Cells = append(row.Cells, r)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// Fill is the booked memory of all GPUs over their capacity, percent.
func (r Result) Fill(memMiB int64) float64 {
	var s int64
	for _, m := range r.MemMiB {
		s += m
	}
	return 100 * float64(s) / float64(memMiB*int64(len(r.MemMiB)))
}

// Under is the number of GPUs with less than half their memory booked.
func (r Result) Under(memMiB int64) int {
	k := 0
	for _, m := range r.MemMiB {
		if 2*m < memMiB {
			k++
		}
	}
	return k
}

func markdown(o options, rows []Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Placement in DRA mode (fragmentation)\n\n")
	fmt.Fprintf(&b, "`go run ./hack/bench/placement` (no cluster): %d seeded workloads of %d pods in order, %d%% asking two GPUs, the others one; "+
		"each GPU 1000..40000 MiB (1000 MiB steps) and 0..50 %% cores (5 %% steps); nodes of %d GPUs of %d MiB, split count %d. "+
		"Each cell: pods placed before the first pod that fits nowhere, the GPUs' booked memory at that point "+
		"(percent of all), and how many GPUs are under half full. DRA: kube-scheduler's allocator "+
		"(k8s.io/dynamic-resource-allocation/structured, v1.37 default features) over the driver's ResourceSlices; "+
		"the node among the feasible ones at random (kube-scheduler does not score devices), or, in the last column, "+
		"the fullest by booked GPU memory (a kube-scheduler profile scoring hami-go.io/gpu-memory with NodeResourcesFit's MostAllocated; ties at random). "+
		"Lag %d: the driver republishes its order only every %d pods (a burst placed before the claims are prepared).\n\n",
		o.seeds, o.pods, o.twoGPU, o.gpus, o.memMiB, o.split, o.lag, o.lag)
	head := make([]string, len(columns))
	for i, c := range columns {
		head[i] = strings.ReplaceAll(c, "%d", strconv.Itoa(o.lag))
	}
	fmt.Fprintf(&b, "| nodes | seed | %s |\n|---|---|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	sums := map[int][]float64{}
	for _, r := range rows {
		cells := make([]string, len(r.Cells))
		for i, c := range r.Cells {
			cells[i] = fmt.Sprintf("%d (%.1f %%, %d under half)", c.Placed, c.Fill(o.memMiB), c.Under(o.memMiB))
			if len(sums[r.Nodes]) < len(r.Cells) {
				sums[r.Nodes] = make([]float64, len(r.Cells))
			}
			sums[r.Nodes][i] += float64(c.Placed) / float64(r.Cells[0].Placed)
		}
		fmt.Fprintf(&b, "| %d | %d | %s |\n", r.Nodes, r.Seed, strings.Join(cells, " | "))
	}
	b.WriteString("\nPods placed before the first refusal, relative to hami-go's binpack (mean over the seeds):\n\n")
	for _, n := range o.nodes {
		var parts []string
		for i := 1; i < len(head); i++ {
			parts = append(parts, fmt.Sprintf("%s %.3f", head[i], sums[n][i]/float64(o.seeds)))
		}
		fmt.Fprintf(&b, "- %d node(s): %s\n", n, strings.Join(parts, "; "))
	}
	b.WriteString("\nPer-GPU booked memory (percent, node by node in GPU index order) at the first refusal, seed 1, clusters of up to 4 nodes:\n\n")
	for _, r := range rows {
		if r.Seed != 1 || r.Nodes > 4 {
			continue
		}
		for i, c := range r.Cells {
			fmt.Fprintf(&b, "- %d node(s), %s: %s\n", r.Nodes, head[i], perGPU(c, o.memMiB, o.gpus))
		}
	}
	return b.String()
}

// perGPU is each GPU's booked memory in percent, nodes separated by " | ".
func perGPU(r Result, memMiB int64, gpus int) string {
	var b strings.Builder
	for i, m := range r.MemMiB {
		if i > 0 {
			if i%gpus == 0 {
				b.WriteString(" | ")
			} else {
				b.WriteByte(' ')
			}
		}
		fmt.Fprintf(&b, "%d", (100*m+memMiB/2)/memMiB)
	}
	return b.String()
}

func run(args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	rows, err := measure(context.Background(), o)
	if err != nil {
		return err
	}
	md := markdown(o, rows)
	fmt.Print(md)
	if o.outFile != "" {
		return os.WriteFile(o.outFile, []byte(md), 0o644)
	}
	return nil
}
