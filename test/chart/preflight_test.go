package chart_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// agentSpecs renders the chart in both modes with extra --set expressions and returns each node
// agent's pod spec and container.
func agentSpecs(t *testing.T, exprs ...string) map[string]struct {
	spec corev1.PodSpec
	c    corev1.Container
} {
	t.Helper()
	out := map[string]struct {
		spec corev1.PodSpec
		c    corev1.Container
	}{}
	for _, m := range []struct{ mode, key, name string }{{"deviceplugin", dpDS, "device-plugin"}, {"dra", draDS, "dra-driver"}} {
		r := renderChart(t, sets(t, append([]string{"mode=" + m.mode}, exprs...)...))
		spec := daemonSet(t, r, m.key).Spec.Template.Spec
		out[m.name] = struct {
			spec corev1.PodSpec
			c    corev1.Container
		}{spec, container(t, spec, m.name)}
	}
	return out
}

func hostPathType(spec corev1.PodSpec, name string) string {
	for _, v := range spec.Volumes {
		if v.Name == name && v.HostPath != nil {
			if v.HostPath.Type == nil {
				return ""
			}
			return string(*v.HostPath.Type)
		}
	}
	return "absent"
}

// Issue 36 item 6: devicePlugin.preflight's candidates become both agents' --toolkit-config and
// --containerd-config, and each becomes visible read-only at /host<path>: under /etc through the
// host's /etc, under /usr through one mount of /usr, elsewhere through its directory.
func TestPreflightCandidatesMountedForBothAgents(t *testing.T) {
	const st = "/var/lib/hami-go-cluster"
	for name, a := range agentSpecs(t,
		"devicePlugin.preflight.toolkitConfig={"+st+"/toolkit/.config/nvidia-container-runtime/config.toml,/etc/nvidia-container-runtime/config.toml,/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml}",
		"devicePlugin.preflight.containerdConfig={"+st+"/containerd/config.toml,/etc/containerd/config.toml}") {
		f := flags(a.c)
		if got, want := f["--toolkit-config"], st+"/toolkit/.config/nvidia-container-runtime/config.toml,/etc/nvidia-container-runtime/config.toml,/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml"; got != want {
			t.Errorf("%s: --toolkit-config=%q, want %q", name, got, want)
		}
		if got, want := f["--containerd-config"], st+"/containerd/config.toml,/etc/containerd/config.toml"; got != want {
			t.Errorf("%s: --containerd-config=%q, want %q", name, got, want)
		}
		hp, m := hostPaths(a.spec), mounts(a.c)
		want := map[string]string{
			"preflight-0": st + "/toolkit/.config/nvidia-container-runtime",
			"preflight-1": "/usr",
			"preflight-2": st + "/containerd",
		}
		for v, p := range want {
			if hp[v] != p || m["/host"+p] != v || readOnly(a.c, v) != "true" {
				t.Errorf("%s: volume %s: hostPath %q mounted at %q read-only %s; want %s at /host%s read-only", name, v, hp[v], mountOf(a.c, v), readOnly(a.c, v), p, p)
			}
		}
		if _, ok := hp["preflight-3"]; ok {
			t.Errorf("%s: an extra preflight volume: %v", name, hp)
		}
		// /usr exists on every node; the other directories may not, and must not keep the agent
		// from starting there.
		if hostPathType(a.spec, "preflight-1") != "Directory" || hostPathType(a.spec, "preflight-0") != "DirectoryOrCreate" {
			t.Errorf("%s: types %s, %s", name, hostPathType(a.spec, "preflight-0"), hostPathType(a.spec, "preflight-1"))
		}
		if hp["host-etc"] != "/etc" || m["/host/etc"] != "host-etc" {
			t.Errorf("%s: the host's /etc not at /host/etc: %v", name, hp)
		}
	}
}

func mountOf(c corev1.Container, volume string) string {
	for _, vm := range c.VolumeMounts {
		if vm.Name == volume {
			return vm.MountPath
		}
	}
	return ""
}

// Candidates only under /etc need no mount beyond the host's /etc.
func TestPreflightCandidatesUnderEtcOnly(t *testing.T) {
	for name, a := range agentSpecs(t, "devicePlugin.preflight.toolkitConfig={/etc/nvidia-container-runtime/config.toml}",
		"devicePlugin.preflight.containerdConfig={/etc/containerd/config.toml}") {
		for v := range hostPaths(a.spec) {
			if strings.HasPrefix(v, "preflight-") {
				t.Errorf("%s: volume %s", name, v)
			}
		}
	}
}

func TestPreflightCandidatesInvalid(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"devicePlugin.preflight.toolkitConfig={etc/x.toml}", "devicePlugin.preflight.toolkitConfig: \"etc/x.toml\""},
		{"devicePlugin.preflight.containerdConfig={/}", "devicePlugin.preflight.containerdConfig: \"/\""},
		{"devicePlugin.preflight.containerdConfig=/etc/containerd/config.toml", "devicePlugin.preflight.containerdConfig must be a list"},
	} {
		_, err := renderFiles(t, sets(t, c.set))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.set, err, c.want)
		}
	}
}

// Issue 36 item 7: devicePlugin.nvidiaDevices says how the agents get their own GPUs and NVML.
func TestNVIDIADevicesModes(t *testing.T) {
	type want struct {
		env, annotation, nvmlLibrary, driverRoot, driverRootType string
		privileged                                               bool
	}
	for _, c := range []struct {
		set  []string
		want want
	}{
		{nil, want{env: "all", driverRoot: "absent"}},
		{[]string{"devicePlugin.nvidiaDevices=cdi-annotation"}, want{env: "void", annotation: "nvidia.com/gpu=all", driverRoot: "absent"}},
		{[]string{"devicePlugin.nvidiaDevices=cdi-annotation", "devicePlugin.toolkitCDIKind=example.com/gpu", "devicePlugin.podAnnotations.a=b", "draDriver.podAnnotations.a=b"},
			want{env: "void", annotation: "example.com/gpu=all", driverRoot: "absent"}},
		{[]string{"devicePlugin.nvidiaDevices=driver-root"}, want{env: "void", privileged: true,
			nvmlLibrary: "/host/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", driverRoot: "/", driverRootType: "Directory"}},
		{[]string{"devicePlugin.nvidiaDevices=driver-root", "devicePlugin.driverRoot=/run/nvidia/driver", "devicePlugin.driverLibDir=/usr/lib64"}, want{env: "void", privileged: true,
			nvmlLibrary: "/host/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1", driverRoot: "/run/nvidia/driver", driverRootType: "Directory"}},
		{[]string{"devicePlugin.privileged=true"}, want{env: "all", privileged: true, driverRoot: "absent"}},
		// The fake backend needs no driver, whatever the mode.
		{[]string{"devicePlugin.backend=fake", "devicePlugin.nvidiaDevices=driver-root"}, want{driverRoot: "absent"}},
	} {
		for _, m := range []struct{ mode, key, name string }{{"deviceplugin", dpDS, "device-plugin"}, {"dra", draDS, "dra-driver"}} {
			r := renderChart(t, sets(t, append([]string{"mode=" + m.mode}, c.set...)...))
			ds := daemonSet(t, r, m.key)
			spec := ds.Spec.Template.Spec
			ct := container(t, spec, m.name)
			env, _ := envOf(ct, "NVIDIA_VISIBLE_DEVICES")
			priv := ct.SecurityContext != nil && ct.SecurityContext.Privileged != nil && *ct.SecurityContext.Privileged
			got := want{env: env, annotation: ds.Spec.Template.Annotations["cdi.k8s.io/hami-go-agent"], nvmlLibrary: flags(ct)["--nvml-library"],
				driverRoot: hostPaths(spec)["driver-root"], driverRootType: hostPathType(spec, "driver-root"), privileged: priv}
			if got.driverRoot == "" {
				got.driverRoot, got.driverRootType = "absent", ""
			}
			if got != c.want {
				t.Errorf("%s %v: got %+v, want %+v", m.name, c.set, got, c.want)
			}
			// The whole driver root at /host<driverRoot> (the simulated driver's socket and device
			// nodes live there, as a driver container's files do), and --nvml-library inside it.
			at := "/host" + strings.TrimSuffix(c.want.driverRoot, "/")
			if c.want.driverRoot != "absent" && (mounts(ct)[at] != "driver-root" || readOnly(ct, "driver-root") != "true" || !strings.HasPrefix(c.want.nvmlLibrary, at+"/")) {
				t.Errorf("%s %v: driver-root not read-only at %s holding %s: %v", m.name, c.set, at, c.want.nvmlLibrary, mounts(ct))
			}
			if ds.Spec.Template.Annotations["a"] == "" && strings.Contains(strings.Join(c.set, " "), "podAnnotations") {
				t.Errorf("%s %v: podAnnotations lost beside the CDI annotation: %v", m.name, c.set, ds.Spec.Template.Annotations)
			}
		}
	}
}

func TestNVIDIADevicesInvalid(t *testing.T) {
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"devicePlugin.nvidiaDevices=runtime"}, "devicePlugin.nvidiaDevices must be"},
		{[]string{"devicePlugin.nvidiaDevices=cdi-annotation", "devicePlugin.toolkitCDIKind="}, "devicePlugin.toolkitCDIKind is empty"},
		{[]string{"devicePlugin.driverLibDir=usr/lib"}, "devicePlugin.driverLibDir must be"},
	} {
		_, err := renderFiles(t, sets(t, c.set...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.set, err, c.want)
		}
	}
}
