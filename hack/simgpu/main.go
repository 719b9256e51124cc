// Command simgpu is hami-go's simulated NVIDIA driver, a test instrument (never shipped in a
// chart image): `simgpu serve` is the "kernel driver" daemon, the C libraries in ./c
// (libnvidia-ml.so, built with ./c/build.sh, and libcuda.so) are its user-space side, `simgpu
// mknod` makes the device nodes that say which GPUs a container may use, `simgpu xid`
// injects XID errors (a non-application XID breaks the GPU, as in pkg/fake) and `simgpu
// recover` repairs a broken GPU.
//
//	simgpu serve --socket /run/nvidia-persistenced/socket --node node-1 --profile dgxh100
//	simgpu mknod --dev-root /var/lib/simgpu --node node-1 --profile dgxh100
//	simgpu devices --socket ... ; simgpu xid --socket ... --gpu 3 --xid 79
//	simgpu recover --socket ... --gpu 3
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/hack/simgpu/daemon"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "simgpu:", err)
		os.Exit(1)
	}
}

// newRootCmd builds the CLI.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{Use: "simgpu", Short: "Simulated NVIDIA driver (test instrument)", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(serveCmd(), xidCmd(), recoverCmd(), devicesCmd(), mknodCmd())
	return root
}

func serveCmd() *cobra.Command {
	var socket, node, profile, driver string
	var cuda int
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the simulated driver daemon on a Unix socket",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			devs, err := daemon.Devices(node, profile)
			if err != nil {
				return err
			}
			ln, err := daemon.Listen(socket)
			if err != nil {
				return err
			}
			defer os.Remove(socket)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			klog.InfoS("Serving the simulated NVIDIA driver", "socket", socket, "node", node, "profile", profile,
				"gpus", len(devs), "driver", driver)
			return daemon.New(daemon.Config{DriverVersion: driver, CUDAVersion: cuda, Devices: devs}).Serve(ctx, ln)
		},
	}
	c.Flags().StringVar(&socket, "socket", "/run/nvidia-persistenced/socket", "Unix socket to serve on")
	c.Flags().StringVar(&node, "node", "", "node name (seeds the GPU UUIDs, as pkg/fake)")
	c.Flags().StringVar(&profile, "profile", "", "pkg/fake profile, e.g. dgxh100 or 2x24576:NVIDIA A10")
	c.Flags().StringVar(&driver, "driver-version", daemon.DefaultDriverVersion, "driver version reported")
	c.Flags().IntVar(&cuda, "cuda-version", daemon.DefaultCUDAVersion, "CUDA driver version (1000*major+10*minor)")
	_ = c.MarkFlagRequired("node")
	_ = c.MarkFlagRequired("profile")
	return c
}

func xidCmd() *cobra.Command {
	var socket, gpu string
	var xid uint64
	c := &cobra.Command{
		Use:   "xid",
		Short: "Inject an XID (critical error event) on a GPU; a non-application XID also breaks it until recover",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return injectXID(socket, gpu, xid, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&socket, "socket", "/run/nvidia-persistenced/socket", "daemon socket")
	c.Flags().StringVar(&gpu, "gpu", "", "GPU UUID or host index")
	c.Flags().Uint64Var(&xid, "xid", 0, "XID number, e.g. 79 (GPU has fallen off the bus)")
	_ = c.MarkFlagRequired("gpu")
	_ = c.MarkFlagRequired("xid")
	return c
}

// injectXID sends XID for gpu (UUID or index) and prints the event's sequence number.
func injectXID(socket, gpu string, xid uint64, out io.Writer) error {
	cl, err := daemon.Dial(socket, "simgpu-xid")
	if err != nil {
		return err
	}
	defer cl.Close()
	index, err := gpuIndex(cl, socket, gpu)
	if err != nil {
		return err
	}
	seq, err := cl.Request(fmt.Sprintf("XID %d %d", index, xid))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "injected XID %d on GPU %d (event %s)\n", xid, index, seq)
	return err
}

func recoverCmd() *cobra.Command {
	var socket, gpu string
	c := &cobra.Command{
		Use:   "recover",
		Short: "Repair a GPU broken by an XID: its memory and process queries answer again",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return recoverGPU(socket, gpu, cmd.OutOrStdout())
		},
	}
	c.Flags().StringVar(&socket, "socket", "/run/nvidia-persistenced/socket", "daemon socket")
	c.Flags().StringVar(&gpu, "gpu", "", "GPU UUID or host index")
	_ = c.MarkFlagRequired("gpu")
	return c
}

// recoverGPU sends RECOVER for gpu (UUID or index).
func recoverGPU(socket, gpu string, out io.Writer) error {
	cl, err := daemon.Dial(socket, "simgpu-recover")
	if err != nil {
		return err
	}
	defer cl.Close()
	index, err := gpuIndex(cl, socket, gpu)
	if err != nil {
		return err
	}
	if _, err := cl.Request(fmt.Sprintf("RECOVER %d", index)); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "recovered GPU %d\n", index)
	return err
}

// gpuIndex resolves gpu, a host index or a UUID, to the daemon's index.
func gpuIndex(cl *daemon.Client, socket, gpu string) (int, error) {
	if i, err := strconv.Atoi(gpu); err == nil {
		return i, nil
	}
	devs, err := cl.Devices()
	if err != nil {
		return 0, err
	}
	for _, d := range devs {
		if d.UUID == gpu {
			return d.Index, nil
		}
	}
	return 0, fmt.Errorf("no GPU %q on the daemon at %s", gpu, socket)
}

func devicesCmd() *cobra.Command {
	var socket string
	c := &cobra.Command{
		Use:   "devices",
		Short: "Print the daemon's devices as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := daemon.Dial(socket, "simgpu-devices")
			if err != nil {
				return err
			}
			defer cl.Close()
			devs, err := cl.Devices()
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(devs)
		},
	}
	c.Flags().StringVar(&socket, "socket", "/run/nvidia-persistenced/socket", "daemon socket")
	return c
}

func mknodCmd() *cobra.Command {
	var root, node, profile string
	c := &cobra.Command{
		Use:   "mknod",
		Short: "Create the simulated device nodes under DIR/dev (needs root)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			devs, err := daemon.Devices(node, profile)
			if err != nil {
				return err
			}
			minors := make([]int, len(devs))
			for i, d := range devs {
				minors[i] = d.Minor
			}
			return MakeNodes(root, minors)
		},
	}
	c.Flags().StringVar(&root, "dev-root", "", "directory whose dev/ gets the nodes")
	c.Flags().StringVar(&node, "node", "", "node name")
	c.Flags().StringVar(&profile, "profile", "", "pkg/fake profile")
	for _, f := range []string{"dev-root", "node", "profile"} {
		_ = c.MarkFlagRequired(f)
	}
	return c
}
