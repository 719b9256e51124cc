package chart_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The chart's kubeVersion floor (>=1.30) is kept (issue 36 item 12): what each cluster version
// gets, rendered as `helm template --kube-version <v>` does.

// kube-scheduler follows the cluster's version (never newer than kube-apiserver); the tag value
// still pins it.
func TestKubeSchedulerFollowsTheClusterVersion(t *testing.T) {
	for _, tc := range []struct {
		kv, tag string
		set     []string
		want    string
	}{
		{kv: "1.30.0", want: "v1.30.0"},
		{kv: "1.33.4", want: "v1.33.4"},
		{kv: "1.35.0", want: "v1.35.0"},
		{kv: "1.37.2", want: "v1.37.2"},
		// Vendor builds: the upstream release of the same patch.
		{kv: "v1.30.4-eks-a737599", want: "v1.30.4"},
		{kv: "v1.31.2+k3s1", want: "v1.31.2"},
		{kv: "1.30.0", set: []string{"scheduler.kubeScheduler.image.tag=v1.30.9"}, want: "v1.30.9"},
	} {
		t.Run(tc.kv+strings.Join(tc.set, ","), func(t *testing.T) {
			ks := container(t, deployment(t, renderAt(t, tc.kv, sets(t, tc.set...)), schedDep).Spec.Template.Spec, "kube-scheduler")
			if want := "registry.k8s.io/kube-scheduler:" + tc.want; ks.Image != want {
				t.Errorf("image %q, want %q", ks.Image, want)
			}
		})
	}
}

// initContainerNamed returns the pod's init container named name, or nil.
func initContainerNamed(spec corev1.PodSpec, name string) *corev1.Container {
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == name {
			return &spec.InitContainers[i]
		}
	}
	return nil
}

// HAMi-core reaches the agent through an image volume where image volumes are on by default
// (>= 1.35), through an init container copying into an emptyDir before; hamiCore.installVia
// overrides. Either way the agent reads /hami-core-image with the same flags.
func TestHAMiCoreInstallPathPerKubeVersion(t *testing.T) {
	for _, tc := range []struct {
		kv      string
		set     []string
		key     string
		ctr     string
		wantVia string
	}{
		{"1.30.0", nil, dpDS, "device-plugin", "initContainer"},
		{"1.33.0", nil, dpDS, "device-plugin", "initContainer"},
		{"1.34.2", []string{"mode=dra"}, draDS, "dra-driver", "initContainer"},
		{"1.35.0", nil, dpDS, "device-plugin", "imageVolume"},
		{"1.35.0", []string{"mode=dra"}, draDS, "dra-driver", "imageVolume"},
		{"1.37.2", nil, dpDS, "device-plugin", "imageVolume"},
		{"1.37.2", []string{"mode=dra"}, draDS, "dra-driver", "imageVolume"},
		// Overrides: the ImageVolume gate turned on in 1.33; an init container on a new cluster.
		{"1.33.0", []string{"hamiCore.installVia=imageVolume"}, dpDS, "device-plugin", "imageVolume"},
		{"1.37.2", []string{"hamiCore.installVia=initContainer"}, dpDS, "device-plugin", "initContainer"},
		{"1.37.2", []string{"mode=dra", "hamiCore.installVia=initContainer"}, draDS, "dra-driver", "initContainer"},
	} {
		t.Run(tc.kv+" "+strings.Join(tc.set, ","), func(t *testing.T) {
			spec := daemonSet(t, renderAt(t, tc.kv, sets(t, tc.set...)), tc.key).Spec.Template.Spec
			c := container(t, spec, tc.ctr)
			f := flags(c)
			if f["--hami-core-install-from"] != "/hami-core-image" || f["--hami-core-host-dir"] != "/usr/local/vgpu" {
				t.Errorf("install flags %v", f)
			}
			if mounts(c)["/hami-core-image"] != "hami-core-image" || readOnly(c, "hami-core-image") != "true" {
				t.Errorf("agent mounts %v, want hami-core-image read-only at /hami-core-image", mounts(c))
			}
			var vol *corev1.Volume
			for i := range spec.Volumes {
				if spec.Volumes[i].Name == "hami-core-image" {
					vol = &spec.Volumes[i]
				}
			}
			if vol == nil {
				t.Fatal("no hami-core-image volume")
			}
			ic := initContainerNamed(spec, "hami-core-copy")
			switch tc.wantVia {
			case "imageVolume":
				if vol.Image == nil || vol.Image.Reference != "docker.io/projecthami/hamicore:v2.10.0" || vol.EmptyDir != nil {
					t.Errorf("volume %+v, want the image volume", vol.VolumeSource)
				}
				if len(spec.InitContainers) != 0 {
					t.Errorf("init containers %v rendered", spec.InitContainers)
				}
			case "initContainer":
				if vol.EmptyDir == nil || vol.Image != nil {
					t.Errorf("volume %+v, want an emptyDir", vol.VolumeSource)
				}
				if ic == nil {
					t.Fatalf("no hami-core-copy init container: %v", spec.InitContainers)
				}
				if ic.Image != "docker.io/projecthami/hamicore:v2.10.0" || ic.ImagePullPolicy != corev1.PullIfNotPresent {
					t.Errorf("init container image %q %q", ic.Image, ic.ImagePullPolicy)
				}
				if g, _ := envOf(*ic, "HAMI_CORE_GLOB"); g != "k8s-vgpu/lib/nvidia/libvgpu.so*" {
					t.Errorf("HAMI_CORE_GLOB %q", g)
				}
				if mounts(*ic)["/hami-core-copy"] != "hami-core-image" || readOnly(*ic, "hami-core-image") != "false" {
					t.Errorf("init container mounts %v", ic.VolumeMounts)
				}
				if len(ic.Command) != 3 || ic.Command[0] != "/bin/sh" || !strings.Contains(ic.Command[2], `cp "$f" "/hami-core-copy/$f"`) {
					t.Errorf("init container command %q", ic.Command)
				}
				if sc := ic.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
					t.Errorf("init container securityContext %+v, want the restricted one", sc)
				}
			}
		})
	}
}

// Nothing to copy without the install (fake backend, bring your own library): no init container
// on an old cluster either.
func TestHAMiCoreInitContainerOnlyWithTheInstall(t *testing.T) {
	for _, set := range [][]string{{"devicePlugin.backend=fake"}, {"hamiCore.install=false"}, {"devicePlugin.enforcement=mps"}} {
		spec := daemonSet(t, renderAt(t, "1.30.0", sets(t, set...)), dpDS).Spec.Template.Spec
		if len(spec.InitContainers) != 0 {
			t.Errorf("%v: init containers %v", set, spec.InitContainers)
		}
		if imageVolume(spec) != nil {
			t.Errorf("%v: image volume", set)
		}
	}
}

// What cannot work on the cluster's version is refused at install, with the reason.
func TestRefusedBelowTheirKubeVersion(t *testing.T) {
	for _, tc := range []struct {
		kv   string
		set  []string
		want string // "" = renders
	}{
		{"1.30.0", []string{"mode=dra"}, "DRA mode needs Kubernetes >= 1.34 (resource.k8s.io/v1); the cluster is v1.30.0"},
		{"1.33.5", []string{"mode=dra"}, "DRA mode needs Kubernetes >= 1.34 (resource.k8s.io/v1); the cluster is v1.33.5"},
		{"v1.33.5-eks-1", []string{"mode=dra", "devicePlugin.backend=fake"}, "DRA mode needs Kubernetes >= 1.34 (resource.k8s.io/v1)"},
		{"1.34.0", []string{"mode=dra"}, ""},
		{"1.30.0", []string{"hamiCore.installVia=imageVolume"}, "hamiCore.installVia=imageVolume needs Kubernetes >= 1.31 (image volumes: alpha in 1.31, on by default from 1.35); the cluster is v1.30.0"},
		{"1.31.0", []string{"hamiCore.installVia=imageVolume"}, ""},
		// Not installing: no image volume, nothing to refuse.
		{"1.30.0", []string{"hamiCore.installVia=imageVolume", "hamiCore.install=false"}, ""},
		{"1.37.2", []string{"hamiCore.installVia=volume"}, `hamiCore.installVia must be "imageVolume", "initContainer" or "" (imageVolume from Kubernetes 1.35, initContainer before), got "volume"`},
	} {
		t.Run(tc.kv+" "+strings.Join(tc.set, ","), func(t *testing.T) {
			_, err := renderFilesAt(t, releaseNamespace, tc.kv, sets(t, tc.set...))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("rendered, want refused with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
