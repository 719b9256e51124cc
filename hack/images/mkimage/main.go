// Command mkimage builds the local cluster's own images as docker-archive tars (no Docker, no
// registry) for `ctr -n k8s.io images import`:
//
//	<out>/pause.tar          registry.k8s.io/pause:3.10 and :3.6 (the workload program as /pause)
//	<out>/workload.tar       docker.io/hami-go/workload:<version> and docker.io/rayproject/ray:<ray-version>
//
// The kube-scheduler image comes from hack/images (--kube-scheduler-bin); both use the layer and
// tar code of hack/images/imagebuild.
//
// The workload image holds the static workload program (hack/workload) as /bin/workload with
// the links /bin/{ray,envdump,sleep,pause}, Debian's bash-static as /bin/bash, and
// busybox-static with a set of applet links (/bin/sh, wget, grep, ...), so KubeRay's
// `/bin/bash -c` command and its `wget ... | grep success` probes run.
//
// Usage (in hack/images, a module of its own): go run ./mkimage --out DIR --workload-bin PATH [--bash PATH] [--busybox PATH]
// [--version 0.1.0] [--ray-version 2.46.0]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var cfg Config
	fs := flag.NewFlagSet("mkimage", flag.ExitOnError)
	fs.StringVar(&cfg.Out, "out", "", "output directory for the .tar files (required)")
	fs.StringVar(&cfg.WorkloadBin, "workload-bin", "", "static workload program built from ./hack/workload (required)")
	fs.StringVar(&cfg.BashBin, "bash", "/bin/bash-static", "static bash (Debian bash-static)")
	fs.StringVar(&cfg.BusyboxBin, "busybox", "/bin/busybox", "static busybox (Debian busybox-static)")
	fs.StringVar(&cfg.GetenvBin, "getenv-bin", "", "static C program of hack/getenv, added as /bin/getenv (optional)")
	fs.StringVar(&cfg.CudaprobeBin, "cudaprobe-bin", "", "hack/simgpu's cudaprobe (dynamically linked), added as /bin/cudaprobe with the host's loader and libc (optional)")
	fs.StringVar(&cfg.HAMiCoreLib, "hamicore-lib", "", "libvgpu.so built by hack/simgpu/hamicore.sh: written as "+HAMiCoreRepo+":<--hamicore-tag> in hamicore.tar (optional)")
	fs.StringVar(&cfg.HAMiCoreTag, "hamicore-tag", "", "the hamicore image's tag and the library's version suffix (with --hamicore-lib)")
	fs.StringVar(&cfg.Version, "version", "0.1.0", "hami-go version (workload image tag)")
	fs.StringVar(&cfg.RayVersion, "ray-version", "2.46.0", "tag of docker.io/rayproject/ray (KubeRay v1.5.0's quick-start rayVersion)")
	_ = fs.Parse(os.Args[1:])
	written, err := Build(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
	for _, w := range written {
		fmt.Println(w)
	}
}
