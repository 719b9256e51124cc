// Command images builds hami-go's container images without Docker or a registry, as
// docker-archive tars that `ctr -n k8s.io images import` and `kind load image-archive` accept:
//
//	<out>/device-plugin.tar            docker.io/hami-go/device-plugin:<version>
//	<out>/scheduler-extender.tar       docker.io/hami-go/scheduler-extender:<version>
//	<out>/webhook.tar                  docker.io/hami-go/webhook:<version>
//	<out>/dra-driver.tar               docker.io/hami-go/dra-driver:<version>
//	<out>/kube-scheduler-hami-go.tar   docker.io/hami-go/kube-scheduler-hami-go:<version>
//	<out>/kube-scheduler.tar           registry.k8s.io/kube-scheduler:<kube-version> (with --kube-scheduler-bin)
//
// scheduler-extender, webhook and kube-scheduler-hami-go (kube-scheduler v1.37.2 with hami-go's
// plugin HamiGo, built in its own module cmd/kube-scheduler-hami-go; the chart's
// scheduler.plugin.image) are static (CGO_ENABLED=0) on an empty base. The device plugin
// and the DRA driver need cgo (go-nvml): by default it is linked against glibc and the image gets a glibc layer
// unpacked from Debian's libc6 package (apt-get download libc6; dpkg -x), so dlopen of the
// driver's libnvidia-ml.so.1 works; --device-plugin-link=static links it statically instead
// (fake backend only, no base layer).
//
// Usage (in hack/images, a module of its own; `make images` from the root):
// go run . --version 0.1.0 --out ../../_output/images --repo-root ../..
// [--images device-plugin,scheduler-extender,webhook,dra-driver,kube-scheduler-hami-go] [--kube-scheduler-bin PATH]
// [--device-plugin-link dynamic|static] [--libc-deb PATH] [--prebuilt name=PATH,...]
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

func main() {
	cfg := DefaultConfig()
	fs := pflag.NewFlagSet("images", pflag.ExitOnError)
	fs.StringVar(&cfg.Version, "version", cfg.Version, "hami-go version: the tag of the images")
	fs.StringVar(&cfg.Out, "out", cfg.Out, "output directory of the .tar files")
	fs.StringSliceVar(&cfg.Images, "images", cfg.Images, "images to build: any of "+strings.Join(Components, ","))
	fs.StringVar(&cfg.Repository, "repository", cfg.Repository, "repository prefix of the images")
	fs.StringVar(&cfg.RepoRoot, "repo-root", cfg.RepoRoot, "module root holding ./cmd/<binary>")
	fs.StringVar(&cfg.DevicePluginLink, "device-plugin-link", cfg.DevicePluginLink, `"dynamic" (glibc layer; NVML and fake) or "static" (no base layer; fake backend only)`)
	fs.StringVar(&cfg.LibcDeb, "libc-deb", cfg.LibcDeb, "Debian libc6 .deb for the glibc layer; empty: apt-get download libc6")
	fs.StringToStringVar(&cfg.Prebuilt, "prebuilt", cfg.Prebuilt, "name=PATH of binaries already built (skips go build for them)")
	fs.StringVar(&cfg.KubeSchedulerBin, "kube-scheduler-bin", cfg.KubeSchedulerBin, "kube-scheduler binary: also write kube-scheduler.tar")
	fs.StringVar(&cfg.KubeVersion, "kube-version", cfg.KubeVersion, "tag of registry.k8s.io/kube-scheduler")
	fs.StringVar(&cfg.GoBin, "go", cfg.GoBin, "go command used to build the binaries")
	_ = fs.Parse(os.Args[1:])
	written, err := Build(cfg, osRunner{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "images: %v\n", err)
		os.Exit(1)
	}
	for _, w := range written {
		fmt.Printf("%s\t%s\n", w.Path, w.Ref)
	}
}
