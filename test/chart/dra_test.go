package chart_test

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

const (
	draDS  = "DaemonSet/hami-go-dra-driver"
	draDC  = "DeviceClass/gpu.hami-go.io"
	draSvc = "Service/hami-go-dra-driver"
	draCR  = "ClusterRole/hami-go-dra-driver"
)

// The default mode is deviceplugin: the device plugin and no DRA objects.
func TestModeDevicePluginIsTheDefault(t *testing.T) {
	r := renderChart(t, nil)
	if !r.has(dpDS) || !r.has("Service/hami-go-device-plugin") || !r.has("ClusterRole/hami-go-device-plugin") {
		t.Fatalf("device plugin missing: %v", r.keys())
	}
	for _, k := range []string{draDS, draDC, draSvc, draCR, "ServiceAccount/hami-go-dra-driver"} {
		if r.has(k) {
			t.Errorf("%s rendered in deviceplugin mode", k)
		}
	}
}

// mode=dra installs the DRA driver INSTEAD of the device plugin, on the same nodes, with the
// shared node settings, its RBAC and the DeviceClass gpu.hami-go.io.
func TestModeDRA(t *testing.T) {
	r := renderChart(t, sets(t, "mode=dra", "devicePlugin.backend=fake", "devicePlugin.fake.profile=dgxa100", "devicePlugin.fake.faultInjection=true",
		"devicePlugin.splitCount=4", "devicePlugin.memoryScaling=1.5", "devicePlugin.reservedMemory=2048\\,GPU-a=4Gi\\,3=0",
		"draDriver.cdiDir=/etc/cdi", "devicePlugin.kubeletDir=/k", "devicePlugin.nodeSelector.gpu=yes",
		"draDriver.image.repository=example.com/dra", "draDriver.image.tag=t1"))
	for _, k := range []string{dpDS, "Service/hami-go-device-plugin", "ClusterRole/hami-go-device-plugin", "ServiceAccount/hami-go-device-plugin"} {
		if r.has(k) {
			t.Errorf("%s rendered in dra mode", k)
		}
	}
	ds := daemonSet(t, r, draDS)
	spec := ds.Spec.Template.Spec
	c := container(t, spec, "dra-driver")
	f := flags(c)
	want := map[string]string{
		"--node-name": "$(NODE_NAME)", "--backend": "fake", "--fake-profile": "dgxa100", "--fake-profile-label": "hami-go.io/fake-profile",
		"--split-count": "4", "--memory-scaling": "1.5", "--reserved-memory": "2048,GPU-a=4Gi,3=0", "--enforcement": "hami-core",
		"--cdi-dir": "/etc/cdi", "--plugin-data-dir": "/k/plugins/gpu.hami-go.io", "--registrar-dir": "/k/plugins_registry",
		"--metrics-address": ":9400", "--fake-fault-injection": "true",
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("flag %s = %q, want %q", k, f[k], v)
		}
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("readinessProbe = %+v, want GET /readyz on port metrics (ready once the kubelet registered the driver)", p)
	}
	if c.Image != "example.com/dra:t1" {
		t.Errorf("image = %q", c.Image)
	}
	if spec.NodeSelector["gpu"] != "yes" || spec.ServiceAccountName != "hami-go-dra-driver" {
		t.Errorf("nodeSelector %v serviceAccount %q", spec.NodeSelector, spec.ServiceAccountName)
	}
	hp := hostPaths(spec)
	if hp["plugins"] != "/k/plugins/gpu.hami-go.io" || hp["plugins-registry"] != "/k/plugins_registry" || hp["cdi"] != "/etc/cdi" {
		t.Errorf("host paths = %v", hp)
	}
	m := mounts(c)
	if m["/k/plugins/gpu.hami-go.io"] != "plugins" || m["/k/plugins_registry"] != "plugins-registry" || m["/etc/cdi"] != "cdi" {
		t.Errorf("mounts = %v", m)
	}
	dc := typedAs[*resourcev1.DeviceClass](t, r, draDC)
	if sel := dc.Spec.Selectors; len(sel) != 1 || sel[0].CEL == nil || sel[0].CEL.Expression != `device.driver == "gpu.hami-go.io"` {
		t.Errorf("DeviceClass selectors = %+v", sel)
	}
	if !r.has(draSvc) {
		t.Error("no metrics Service for the DRA driver")
	}
}

// The DRA driver's RBAC is what the kubeletplugin helper needs and no more.
func TestModeDRARBAC(t *testing.T) {
	r := renderChart(t, sets(t, "mode=dra"))
	got := ruleSet(typedAs[*rbacv1.ClusterRole](t, r, draCR).Rules)
	want := []string{
		"resource.k8s.io|resourceslices|get", "resource.k8s.io|resourceslices|list", "resource.k8s.io|resourceslices|watch",
		"resource.k8s.io|resourceslices|create", "resource.k8s.io|resourceslices|update", "resource.k8s.io|resourceslices|patch",
		"resource.k8s.io|resourceslices|delete", "resource.k8s.io|resourceslices|deletecollection",
		"resource.k8s.io|resourceclaims|get", "|nodes|get",
	}
	if len(got) != len(want) {
		t.Errorf("rules = %v, want %v", got, want)
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("missing rule %s (have %v)", w, got)
		}
	}
}

// An unknown mode fails the install naming the value.
func TestModeInvalid(t *testing.T) {
	for set, want := range map[string]string{
		"mode=both": `mode must be "deviceplugin" or "dra", got "both"`,
	} {
		if _, err := renderFiles(t, sets(t, set)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", set, err, want)
		}
	}
}
