package chart_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// hamiCoreFlags are the node agents' flags of an install from the image.
var hamiCoreInstallFlags = []string{"--hami-core-install-from", "--hami-core-install-glob", "--hami-core-host-dir", "--hami-core-cache-dir"}

// With real GPUs and hami-core enforcement, both node agents (the device plugin in mode
// deviceplugin, the DRA driver in mode dra) mount the HAMi-core image read-only at
// /hami-core-image, mount the host directory read-write and get the install flags; the fake
// backend (no such image on a test cluster, no network), other enforcement modes and
// hamiCore.install=false get no image volume and today's --hami-core-library.
func TestHAMiCoreInstall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		set     []string
		key     string
		ctr     string
		install bool
	}{
		{"deviceplugin nvml", nil, dpDS, "device-plugin", true},
		{"dra nvml", []string{"mode=dra"}, draDS, "dra-driver", true},
		{"deviceplugin fake", []string{"devicePlugin.backend=fake"}, dpDS, "device-plugin", false},
		{"dra fake", []string{"mode=dra", "devicePlugin.backend=fake"}, draDS, "dra-driver", false},
		{"deviceplugin install=false", []string{"hamiCore.install=false"}, dpDS, "device-plugin", false},
		{"dra install=false", []string{"mode=dra", "hamiCore.install=false"}, draDS, "dra-driver", false},
		{"deviceplugin mps", []string{"devicePlugin.enforcement=mps"}, dpDS, "device-plugin", false},
		{"dra none", []string{"mode=dra", "devicePlugin.enforcement=none"}, draDS, "dra-driver", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := renderChart(t, sets(t, tc.set...))
			spec := daemonSet(t, r, tc.key).Spec.Template.Spec
			c := container(t, spec, tc.ctr)
			f := flags(c)
			iv := imageVolume(spec)
			// No other workload of the release mounts the image.
			for k, s := range podSpecs(t, r) {
				if k != tc.key && imageVolume(s) != nil {
					t.Errorf("%s has the HAMi-core image volume", k)
				}
			}
			if !tc.install {
				if iv != nil {
					t.Errorf("image volume %+v rendered", iv)
				}
				for _, k := range hamiCoreInstallFlags[:3] {
					if _, ok := f[k]; ok {
						t.Errorf("flag %s rendered", k)
					}
				}
				if _, ok := mounts(c)["/hami-core-image"]; ok {
					t.Error("/hami-core-image mounted")
				}
				if f["--hami-core-library"] != "/usr/local/vgpu/libvgpu.so" {
					t.Errorf("--hami-core-library = %q, want today's /usr/local/vgpu/libvgpu.so", f["--hami-core-library"])
				}
				// With hami-core enforcement on any backend, the containers' cache directories
				// (a readOnlyRootFilesystem container cannot create HAMi-core's cache file).
				wantCache := ""
				if f["--enforcement"] == "hami-core" {
					wantCache = "/usr/local/vgpu/containers"
				}
				if got := words(f["--hami-core-cache-dir"], hostPaths(spec)["hami-core-cache"], mounts(c)[wantCache], readOnly(c, "hami-core-cache")); wantCache != "" && got != "/usr/local/vgpu/containers /usr/local/vgpu/containers hami-core-cache false" || wantCache == "" && f["--hami-core-cache-dir"] != "" {
					t.Errorf("cache directories: %s; want %q as flag, read-write hostPath and mount", got, wantCache)
				}
				return
			}
			if iv == nil || iv.Reference != "docker.io/projecthami/hamicore:v2.10.0" || iv.PullPolicy != corev1.PullIfNotPresent {
				t.Fatalf("image volume %+v, want docker.io/projecthami/hamicore:v2.10.0 IfNotPresent", iv)
			}
			if got := words(mounts(c)["/hami-core-image"], readOnly(c, "hami-core-image")); got != "hami-core-image true" {
				t.Errorf("image mount: %s, want hami-core-image read-only", got)
			}
			if got := words(hostPaths(spec)["hami-core"], mounts(c)["/usr/local/vgpu"], readOnly(c, "hami-core")); got != "/usr/local/vgpu hami-core false" {
				t.Errorf("host directory: %s, want /usr/local/vgpu mounted read-write", got)
			}
			var got []string
			for _, k := range hamiCoreInstallFlags {
				got = append(got, k+"="+f[k])
			}
			want := "--hami-core-install-from=/hami-core-image --hami-core-install-glob=k8s-vgpu/lib/nvidia/libvgpu.so* --hami-core-host-dir=/usr/local/vgpu --hami-core-cache-dir=/usr/local/vgpu/containers"
			if strings.Join(got, " ") != want {
				t.Errorf("flags %s\nwant %s", strings.Join(got, " "), want)
			}
			if _, ok := f["--hami-core-library"]; ok {
				t.Error("--hami-core-library rendered while the agent installs the library")
			}
		})
	}
}
