package chart_test

import (
	"crypto/x509"
	"encoding/pem"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestDefaultValuesRenderTheWholeRelease(t *testing.T) {
	r := renderChart(t, nil)
	want := []string{
		"ClusterRole/hami-go-device-plugin", "ClusterRole/hami-go-scheduler-extender", "ClusterRole/hami-go-webhook",
		"ClusterRoleBinding/hami-go-device-plugin", "ClusterRoleBinding/hami-go-scheduler-extender", "ClusterRoleBinding/hami-go-webhook",
		"ClusterRole/hami-go-dra-driver", "ClusterRoleBinding/hami-go-dra-driver", "ServiceAccount/hami-go-dra-driver",
		"ClusterRoleBinding/hami-go-scheduler-kube-scheduler", "ClusterRoleBinding/hami-go-scheduler-volume-scheduler",
		"ConfigMap/hami-go-dashboard", schedCM, dpDS, schedDep, webhookDep, webhookMWC,
		"PodDisruptionBudget/hami-go-webhook",
		"Role/hami-go-system/hami-go-scheduler-leader-election", "Role/kube-node-lease/hami-go-device-plugin",
		"Role/kube-node-lease/hami-go-scheduler-extender-leases",
		"RoleBinding/hami-go-system/hami-go-scheduler-leader-election", "RoleBinding/kube-node-lease/hami-go-device-plugin",
		"RoleBinding/kube-node-lease/hami-go-scheduler-extender-leases", "RoleBinding/kube-system/hami-go-scheduler-authentication-reader",
		webhookSec, "Secret/hami-go-scheduler-extender-tls", "Service/hami-go-device-plugin", "Service/hami-go-scheduler", webhookSvc,
		"ValidatingAdmissionPolicy/hami-go-allocation-records", "ValidatingAdmissionPolicyBinding/hami-go-allocation-records",
		"ValidatingAdmissionPolicy/hami-go-gpu-memory", "ValidatingAdmissionPolicyBinding/hami-go-gpu-memory",
		"ValidatingAdmissionPolicy/hami-go-gpu-claims", "ValidatingAdmissionPolicyBinding/hami-go-gpu-claims",
		"ValidatingAdmissionPolicy/hami-go-cdi-annotations", "ValidatingAdmissionPolicyBinding/hami-go-cdi-annotations",
		"ServiceAccount/hami-go-device-plugin", "ServiceAccount/hami-go-scheduler", "ServiceAccount/hami-go-webhook",
		// helm uninstall's pre-delete hook (uninstall_test.go).
		"Job/hami-go-uninstall", "Role/hami-go-system/hami-go-uninstall", "RoleBinding/hami-go-system/hami-go-uninstall", "ServiceAccount/hami-go-uninstall",
	}
	sort.Strings(want)
	if got := r.keys(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for k, o := range r.objs {
		if k == webhookMWC || strings.HasPrefix(k, "Cluster") || strings.HasPrefix(k, "ValidatingAdmissionPolicy") {
			if o.ns != "" {
				t.Errorf("%s is cluster-scoped but has namespace %q", k, o.ns)
			}
			continue
		}
		if strings.HasPrefix(k, "Role") {
			continue // namespaces checked in TestRBAC
		}
		if o.ns != releaseNamespace {
			t.Errorf("%s in namespace %q, want %q", k, o.ns, releaseNamespace)
		}
	}
}

func TestDevicePluginDaemonSetNVML(t *testing.T) {
	r := renderChart(t, nil)
	ds := daemonSet(t, r, dpDS)
	spec := ds.Spec.Template.Spec
	c := container(t, spec, "device-plugin")
	if c.Image != "docker.io/hami-go/device-plugin:0.1.0" {
		t.Errorf("image %s", c.Image)
	}
	wantFlags := map[string]string{
		"--node-name": "$(NODE_NAME)", "--backend": "nvml", "--split-count": "10", "--memory-scaling": "1",
		"--enforcement": "hami-core", "--device-list-strategy": "cdi", "--cdi-spec-dir": "/var/run/cdi",
		"--hami-core-install-from": "/hami-core-image", "--hami-core-install-glob": "k8s-vgpu/lib/nvidia/libvgpu.so*",
		"--hami-core-host-dir": "/usr/local/vgpu", "--hami-core-cache-dir": "/usr/local/vgpu/containers", "--mps-pipe-dir": "/tmp/nvidia-mps",
		"--application-xids": "13,31,43,45,68,109", "--recovery-probes": "3", "--probe-interval": "5s",
		"--plan-wait": "5s", "--device-plugin-dir": "/var/lib/kubelet/device-plugins", "--drain-timeout": "3600s",
		"--lease-namespace": "kube-node-lease",
		"--metrics-address": ":9400", "--resource-count": "nvidia.com/gpu", "--resource-memory": "nvidia.com/gpumem",
		"--resource-memory-percentage": "nvidia.com/gpumem-percentage", "--resource-cores": "nvidia.com/gpucores", "-v": "2",
		"--nri-socket": "/var/run/nri/nri.sock", "--nri-exempt-namespaces": "hami-go-system,kube-system",
		"--driver-root": "/", "--toolkit-cdi-kind": "nvidia.com/gpu", // cases C53, C55
		// Issue 36 item 6: the preflight's candidates, in order.
		"--toolkit-config":    "/etc/nvidia-container-runtime/config.toml,/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml",
		"--containerd-config": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml,/var/lib/rancher/rke2/agent/etc/containerd/config.toml,/etc/containerd/config.toml",
	}
	if got := flags(c); !mapsEqual(got, wantFlags) {
		t.Errorf("flags %v\nwant %v", got, wantFlags)
	}
	if v, _ := envOf(c, "NODE_NAME"); v != "fieldRef:spec.nodeName" {
		t.Errorf("NODE_NAME = %q, want the downward API's spec.nodeName", v)
	}
	if v, _ := envOf(c, "NVIDIA_VISIBLE_DEVICES"); v != "all" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want all (nvml backend)", v)
	}
	if _, ok := envOf(c, "KUBERNETES_SERVICE_HOST"); ok {
		t.Error("KUBERNETES_SERVICE_HOST set without apiServer.host")
	}
	// case C37: real GPUs get the cdi strategy by default, so the CDI spec dir is mounted read-write.
	// The host's /etc (read-only) is the preflight's (runtime and toolkit configuration), and so
	// is its /var/run/cdi (read-only, the toolkit's CDI spec: case C55); the driver root's /dev
	// (read-only) holds the device nodes the CDI spec lists (case C53; pkg/deviceplugin run.go
	// looks for them under /host<driverRoot>/dev).
	wantHost := map[string]string{"device-plugins": "/var/lib/kubelet/device-plugins", "hami-core": "/usr/local/vgpu", "cdi": "/var/run/cdi", "nri": "/var/run/nri", "host-etc": "/etc",
		"driver-dev": "/dev", "host-cdi": "/var/run/cdi",
		// The host's /proc (read-only): NVML's host PIDs to containers, per-slice memory use.
		"host-proc": "/proc",
		// The preflight's candidates outside /etc: /usr (the GPU Operator's toolkit), k3s's and rke2's config directories.
		"preflight-0": "/usr", "preflight-1": "/var/lib/rancher/k3s/agent/etc/containerd", "preflight-2": "/var/lib/rancher/rke2/agent/etc/containerd"}
	if got := hostPaths(spec); !mapsEqual(got, wantHost) {
		t.Errorf("hostPaths %v, want %v (the CDI dir with the default cdi strategy)", got, wantHost)
	}
	wantMounts := map[string]string{"/var/lib/kubelet/device-plugins": "device-plugins", "/usr/local/vgpu": "hami-core", "/var/run/cdi": "cdi", "/var/run/nri": "nri", "/hami-core-image": "hami-core-image", "/host/etc": "host-etc",
		"/host/dev": "driver-dev", "/host/var/run/cdi": "host-cdi", "/host/proc": "host-proc",
		"/host/usr": "preflight-0", "/host/var/lib/rancher/k3s/agent/etc/containerd": "preflight-1", "/host/var/lib/rancher/rke2/agent/etc/containerd": "preflight-2"}
	if got := mounts(c); !mapsEqual(got, wantMounts) {
		t.Errorf("mounts %v, want %v", got, wantMounts)
	}
	// The plugin installs HAMi-core into its host directory (read-write) from the image volume.
	for _, vm := range c.VolumeMounts {
		if ro := vm.Name != "device-plugins" && vm.Name != "cdi" && vm.Name != "hami-core"; vm.ReadOnly != ro {
			t.Errorf("mount %s readOnly=%v, want %v", vm.Name, vm.ReadOnly, ro)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("securityContext %+v: want unprivileged, no escalation, all capabilities dropped, read-only root", sc)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Key == "nvidia.com/gpu" && tl.Operator == corev1.TolerationOpExists && tl.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("tolerations %v lack nvidia.com/gpu:NoSchedule", spec.Tolerations)
	}
	if !mapsEqual(spec.NodeSelector, map[string]string{"hami-go.io/device-plugin": "true"}) {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if spec.ServiceAccountName != "hami-go-device-plugin" || spec.HostNetwork || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("serviceAccount %q hostNetwork %v priorityClass %q", spec.ServiceAccountName, spec.HostNetwork, spec.PriorityClassName)
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Port.String() != "metrics" {
		t.Errorf("liveness probe %+v", c.LivenessProbe)
	}
	if r.has(mpsDS) {
		t.Error("MPS control daemon rendered with hami-core enforcement")
	}
}

func TestDevicePluginFakeMode(t *testing.T) {
	r := renderChart(t, sets(t, "devicePlugin.backend=fake", "devicePlugin.fake.profile=dgxa100",
		"devicePlugin.fake.profileLabel=example.com/pool", "devicePlugin.fake.faultInjection=true",
		"devicePlugin.privileged=true", "devicePlugin.runtimeClassName=nvidia"))
	spec := daemonSet(t, r, dpDS).Spec.Template.Spec
	c := container(t, spec, "device-plugin")
	f := flags(c)
	for k, v := range map[string]string{"--backend": "fake", "--fake-profile": "dgxa100", "--fake-profile-label": "example.com/pool", "--fake-fault-injection": "true"} {
		if f[k] != v {
			t.Errorf("%s = %q, want %q", k, f[k], v)
		}
	}
	if _, ok := envOf(c, "NVIDIA_VISIBLE_DEVICES"); ok {
		t.Error("NVIDIA_VISIBLE_DEVICES set in fake mode")
	}
	if *c.SecurityContext.Privileged {
		t.Error("privileged in fake mode: the fake backend needs no device access")
	}
	if spec.RuntimeClassName != nil {
		t.Errorf("runtimeClassName %q in fake mode", *spec.RuntimeClassName)
	}
	if _, ok := hostPaths(spec)["hami-core"]; ok {
		t.Error("HAMi-core directory mounted in fake mode")
	}
	// Fake GPUs have no driver root and no toolkit spec (cases C53, C55).
	for _, k := range []string{"--driver-root", "--toolkit-cdi-kind"} {
		if _, ok := f[k]; ok {
			t.Errorf("%s given to the fake backend", k)
		}
	}
	for _, v := range []string{"driver-dev", "host-cdi"} {
		if _, ok := hostPaths(spec)[v]; ok {
			t.Errorf("volume %s in fake mode", v)
		}
	}
	// The nvml backend gets no fake flags.
	nf := flags(container(t, daemonSet(t, renderChart(t, nil), dpDS).Spec.Template.Spec, "device-plugin"))
	for _, k := range []string{"--fake-profile", "--fake-profile-label", "--fake-fault-injection"} {
		if _, ok := nf[k]; ok {
			t.Errorf("%s given to the nvml backend", k)
		}
	}
}

func TestMPSControlDaemon(t *testing.T) {
	r := renderChart(t, sets(t, "devicePlugin.enforcement=mps", "devicePlugin.mps.pipeDir=/run/mps-pipes"))
	ds := daemonSet(t, r, mpsDS)
	spec := ds.Spec.Template.Spec
	c := container(t, spec, "mps-control-daemon")
	if got := hostPaths(spec)["mps-pipe"]; got != "/run/mps-pipes" {
		t.Errorf("MPS pipe hostPath %q", got)
	}
	if mounts(c)["/run/mps-pipes"] != "mps-pipe" {
		t.Errorf("pipe directory not mounted at the same path: %v", mounts(c))
	}
	if !strings.Contains(strings.Join(c.Args, " "), "CUDA_MPS_PIPE_DIRECTORY=/run/mps-pipes") {
		t.Errorf("daemon script does not use the pipe directory: %v", c.Args)
	}
	if f := flags(container(t, daemonSet(t, r, dpDS).Spec.Template.Spec, "device-plugin")); f["--mps-pipe-dir"] != "/run/mps-pipes" || f["--enforcement"] != "mps" {
		t.Errorf("device plugin flags %v", f)
	}
	if !spec.HostPID || !spec.HostIPC {
		t.Error("MPS daemon without hostPID/hostIPC")
	}
	if !mapsEqual(spec.NodeSelector, daemonSet(t, r, dpDS).Spec.Template.Spec.NodeSelector) {
		t.Error("MPS daemon on other nodes than the device plugin")
	}
	// The fake backend has no GPUs for MPS.
	if renderChart(t, sets(t, "devicePlugin.enforcement=mps", "devicePlugin.backend=fake")).has(mpsDS) {
		t.Error("MPS daemon rendered for the fake backend")
	}
}

func TestSchedulerDeployment(t *testing.T) {
	r := renderChart(t, nil)
	d := deployment(t, r, schedDep)
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "kube-scheduler" || len(spec.InitContainers) != 1 || len(sidecars(spec)) != 1 || sidecars(spec)[0].Name != "extender" {
		t.Fatalf("containers %d, init containers %d, want kube-scheduler and the extender as its native sidecar", len(spec.Containers), len(spec.InitContainers))
	}
	ks := container(t, spec, "kube-scheduler")
	if ks.Image != "registry.k8s.io/kube-scheduler:v1.37.2" {
		t.Errorf("kube-scheduler image %s", ks.Image)
	}
	if f := flags(ks); f["--config"] != "/etc/hami-go/scheduler/config.yaml" || f["--secure-port"] != "10259" {
		t.Errorf("kube-scheduler flags %v", f)
	}
	if ks.Command[0] != "kube-scheduler" {
		t.Errorf("kube-scheduler command %v", ks.Command)
	}
	if mounts(ks)["/etc/hami-go/scheduler"] != "config" {
		t.Errorf("config not mounted: %v", mounts(ks))
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "config" && v.ConfigMap != nil && v.ConfigMap.Name == "hami-go-scheduler"
	}) {
		t.Error("no config volume from ConfigMap hami-go-scheduler")
	}
	ex := container(t, spec, "extender")
	want := map[string]string{
		"--address": "127.0.0.1:8888", "--metrics-address": ":9395", "--scheduler-name": "hami-go-scheduler", "--node-policy": "binpack", "--gpu-policy": "binpack",
		"--inventory-stale-after": "60s", "--lease-namespace": "kube-node-lease", "--preemption": "own",
		"--leader-election-lease": "hami-go-system/hami-go-scheduler",
		"--resource-count":        "nvidia.com/gpu", "--resource-memory": "nvidia.com/gpumem",
		"--resource-memory-percentage": "nvidia.com/gpumem-percentage", "--resource-cores": "nvidia.com/gpucores", "-v": "2",
		"--tls-cert-file": "/etc/hami-go/extender-tls/tls.crt", "--tls-private-key-file": "/etc/hami-go/extender-tls/tls.key",
		"--client-ca-file": "/etc/hami-go/extender-tls/client-ca.crt",
	}
	if got := flags(ex); !mapsEqual(got, want) {
		t.Errorf("extender flags %v\nwant %v", got, want)
	}
	if ex.Image != "docker.io/hami-go/scheduler-extender:0.1.0" {
		t.Errorf("extender image %s", ex.Image)
	}
	// The API stays on loopback; only the metrics listener is a port, and the probes use it.
	if len(ex.Ports) != 1 || ex.Ports[0].Name != "metrics" || ex.Ports[0].ContainerPort != 9395 ||
		ex.ReadinessProbe == nil || ex.ReadinessProbe.HTTPGet.Path != "/readyz" || ex.ReadinessProbe.HTTPGet.Port.String() != "metrics" ||
		ex.LivenessProbe == nil || ex.LivenessProbe.HTTPGet.Path != "/healthz" || ex.LivenessProbe.HTTPGet.Port.String() != "metrics" {
		t.Errorf("extender ports %+v readiness %+v liveness %+v, want only metrics 9395 and probes on it", ex.Ports, ex.ReadinessProbe, ex.LivenessProbe)
	}
	if svc := typedAs[*corev1.Service](t, r, "Service/hami-go-scheduler"); len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9395 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("extender metrics Service ports %+v", svc.Spec.Ports)
	}
	if spec.ServiceAccountName != "hami-go-scheduler" || *d.Spec.Replicas != 1 {
		t.Errorf("serviceAccount %q replicas %d", spec.ServiceAccountName, *d.Spec.Replicas)
	}
	for _, c := range runningContainers(spec) {
		if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: securityContext %+v, want non-root and read-only", c.Name, sc)
		}
	}
	// A changed configuration rolls the pods.
	a := d.Spec.Template.Annotations["checksum/config"]
	b := deployment(t, renderChart(t, sets(t, "scheduler.percentageOfNodesToScore=50")), schedDep).Spec.Template.Annotations["checksum/config"]
	if a == "" || a == b {
		t.Errorf("checksum/config %q -> %q, want a change", a, b)
	}
	checkExtenderTLS(t, r, spec, ks, ex)
	// Extender API beyond loopback: only --address changes; probes stay on the metrics port.
	r2 := renderChart(t, sets(t, "scheduler.extender.bindAddress="))
	ex2 := container(t, deployment(t, r2, schedDep).Spec.Template.Spec, "extender")
	if flags(ex2)["--address"] != ":8888" || flags(ex2)["--metrics-address"] != ":9395" || ex2.ReadinessProbe == nil || ex2.ReadinessProbe.HTTPGet.Path != "/readyz" || ex2.ReadinessProbe.HTTPGet.Port.String() != "metrics" {
		t.Errorf("extender on all interfaces: flags %v probe %+v", flags(ex2), ex2.ReadinessProbe)
	}
}

func TestWebhookDeploymentAndConfiguration(t *testing.T) {
	r := renderChart(t, nil)
	d := deployment(t, r, webhookDep)
	spec := d.Spec.Template.Spec
	c := container(t, spec, "webhook")
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas %d, want 2", *d.Spec.Replicas)
	}
	want := map[string]string{
		"--mode": "deviceplugin", "--port": "9443", "--cert-dir": "/etc/hami-go/tls", "--health-address": ":8081", "--metrics-address": ":8080",
		"--scheduler-name": "hami-go-scheduler", "--privileged": "deny", "--resource-annotations": "deny", "--ray-memory-resource": "gpu_memory_mib",
		"--resource-count": "nvidia.com/gpu", "--resource-memory": "nvidia.com/gpumem",
		"--resource-memory-percentage": "nvidia.com/gpumem-percentage", "--resource-cores": "nvidia.com/gpucores", "-v": "2",
	}
	if got := flags(c); !mapsEqual(got, want) {
		t.Errorf("webhook flags %v\nwant %v", got, want)
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/readyz" || rp.HTTPGet.Port.String() != "health" {
		t.Errorf("readiness probe %+v, want GET /readyz on port health", rp)
	}
	if port := namedPort(c, "health"); port != 8081 {
		t.Errorf("health port %d", port)
	}
	if mounts(c)["/etc/hami-go/tls"] != "tls" || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != "hami-go-webhook-tls" {
		t.Errorf("TLS secret not mounted at --cert-dir: %+v", spec.Volumes)
	}
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil || len(spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("replicas not spread over nodes: %+v", spec.Affinity)
	}

	m := mwc(t, r)
	if len(m.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want pods and rayclusters", len(m.Webhooks))
	}
	paths := map[string]string{"gpu-pods.hami-go.io": "/mutate-pods", "gpu-rayclusters.hami-go.io": "/mutate-rayclusters"}
	res := map[string]admissionv1.RuleWithOperations{}
	for _, w := range m.Webhooks {
		if *w.FailurePolicy != admissionv1.Fail || *w.SideEffects != admissionv1.SideEffectClassNone || *w.TimeoutSeconds != 10 {
			t.Errorf("%s: failurePolicy %v sideEffects %v timeout %d", w.Name, *w.FailurePolicy, *w.SideEffects, *w.TimeoutSeconds)
		}
		svc := w.ClientConfig.Service
		if svc == nil || svc.Name != "hami-go-webhook" || svc.Namespace != releaseNamespace || *svc.Path != paths[w.Name] || *svc.Port != 443 || w.ClientConfig.URL != nil {
			t.Errorf("%s: clientConfig %+v", w.Name, w.ClientConfig)
		}
		if want := map[string]int{"gpu-pods.hami-go.io": 2}[w.Name]; len(w.Rules) != max(want, 1) {
			t.Fatalf("%s: %d rules", w.Name, len(w.Rules))
		}
		res[w.Name] = w.Rules[0]
		if len(w.Rules) == 2 {
			res[w.Name+"/1"] = w.Rules[1]
		}
		checkSelectors(t, w, []string{releaseNamespace, "kube-system"})
	}
	pods, rc := res["gpu-pods.hami-go.io"], res["gpu-rayclusters.hami-go.io"]
	// case C37: kubectl debug's ephemeral containers are reviewed too.
	if eph := res["gpu-pods.hami-go.io/1"]; !slices.Equal(eph.Resources, []string{"pods/ephemeralcontainers"}) || !slices.Equal(eph.Operations, []admissionv1.OperationType{admissionv1.Update}) {
		t.Errorf("ephemeral containers rule %+v", eph)
	}
	if !slices.Equal(pods.APIGroups, []string{""}) || !slices.Equal(pods.Resources, []string{"pods"}) || !slices.Equal(pods.Operations, []admissionv1.OperationType{admissionv1.Create}) {
		t.Errorf("pods rule %+v", pods)
	}
	if !slices.Equal(rc.APIGroups, []string{"ray.io"}) || !slices.Equal(rc.APIVersions, []string{"v1"}) || !slices.Equal(rc.Resources, []string{"rayclusters"}) ||
		!slices.Equal(rc.Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("rayclusters rule %+v", rc)
	}
	checkServingCert(t, r, m, []string{"hami-go-webhook", "hami-go-webhook.hami-go-system", "hami-go-webhook.hami-go-system.svc", "hami-go-webhook.hami-go-system.svc.cluster.local"}, nil)
}

// checkSelectors: the namespaceSelector keeps out exactly excluded, the objectSelector keeps out
// hami-go.io/ignore=true, evaluated as the API server does.
func checkSelectors(t *testing.T, w admissionv1.MutatingWebhook, excluded []string) {
	t.Helper()
	ns, err := metav1.LabelSelectorAsSelector(w.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range append(slices.Clone(excluded), "default", "team-a") {
		got := ns.Matches(labels.Set{"kubernetes.io/metadata.name": n})
		if want := !slices.Contains(excluded, n); got != want {
			t.Errorf("%s: namespace %s sent to the webhook = %v, want %v", w.Name, n, got, want)
		}
	}
	obj, err := metav1.LabelSelectorAsSelector(w.ObjectSelector)
	if err != nil {
		t.Fatal(err)
	}
	for set, want := range map[string]bool{"": true, "hami-go.io/ignore=true": false, "hami-go.io/ignore=false": true, "app=x": true} {
		l, _ := labels.ConvertSelectorToLabelsMap(set)
		if got := obj.Matches(l); got != want {
			t.Errorf("%s: object labelled %q sent = %v, want %v", w.Name, set, got, want)
		}
	}
}

// checkServingCert: the Secret's certificate is signed by the CA in every webhook's caBundle and
// covers dns and ips.
func checkServingCert(t *testing.T, r rendered, m *admissionv1.MutatingWebhookConfiguration, dns, ips []string) {
	t.Helper()
	sec := typedAs[*corev1.Secret](t, r, webhookSec)
	if sec.Type != corev1.SecretTypeTLS || len(sec.Data["tls.key"]) == 0 {
		t.Fatalf("secret type %s, keys %v", sec.Type, len(sec.Data))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(sec.Data["ca.crt"]) {
		t.Fatal("ca.crt is not PEM")
	}
	for _, w := range m.Webhooks {
		if string(w.ClientConfig.CABundle) != string(sec.Data["ca.crt"]) {
			t.Errorf("%s: caBundle is not the Secret's ca.crt", w.Name)
		}
	}
	blk, _ := pem.Decode(sec.Data["tls.crt"])
	if blk == nil {
		t.Fatal("tls.crt is not PEM")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range dns {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: n, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate for %s: %v", n, err)
		}
	}
	for _, ip := range ips {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: ip, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("certificate for IP %s: %v", ip, err)
		}
	}
}

func TestWebhookCertManagerMode(t *testing.T) {
	r := renderChart(t, sets(t, "webhook.certs.mode=certManager"))
	if r.has(webhookSec) {
		t.Error("chart generated a Secret in cert-manager mode")
	}
	m := mwc(t, r)
	if got := m.Annotations["cert-manager.io/inject-ca-from"]; got != releaseNamespace+"/hami-go-webhook" {
		t.Errorf("inject-ca-from %q", got)
	}
	for _, w := range m.Webhooks {
		if len(w.ClientConfig.CABundle) != 0 {
			t.Errorf("%s: caBundle set; cainjector fills it", w.Name)
		}
	}
	cert := r.get(t, "Certificate/hami-go-webhook").raw
	if got := field(t, cert, "spec", "secretName"); got != "hami-go-webhook-tls" {
		t.Errorf("secretName %v", got)
	}
	dns := field(t, cert, "spec", "dnsNames").([]any)
	if len(dns) != 4 || dns[2] != "hami-go-webhook.hami-go-system.svc" {
		t.Errorf("dnsNames %v", dns)
	}
	if got := field(t, cert, "spec", "issuerRef", "name"); got != "hami-go-webhook-selfsigned" {
		t.Errorf("issuerRef %v", got)
	}
	if got := field(t, r.get(t, "Issuer/hami-go-webhook-selfsigned").raw, "spec", "selfSigned"); got == nil {
		t.Error("issuer is not selfSigned")
	}
	// An existing issuer: no Issuer rendered, the Certificate names it.
	r2 := renderChart(t, sets(t, "webhook.certs.mode=certManager", "webhook.certs.certManager.issuerRef.name=corp-ca", "webhook.certs.certManager.issuerRef.kind=ClusterIssuer"))
	if r2.has("Issuer/hami-go-webhook-selfsigned") {
		t.Error("self-signed Issuer rendered beside a given issuerRef")
	}
	if got := field(t, r2.get(t, "Certificate/hami-go-webhook").raw, "spec", "issuerRef", "kind"); got != "ClusterIssuer" {
		t.Errorf("issuerRef.kind %v", got)
	}
	// The webhook mounts the Secret cert-manager writes.
	if s := deployment(t, r, webhookDep).Spec.Template.Spec.Volumes[0].Secret; s == nil || s.SecretName != "hami-go-webhook-tls" {
		t.Errorf("webhook volume %+v", s)
	}
}

func TestWebhookURLMode(t *testing.T) {
	r := renderChart(t, sets(t, "webhook.url=https://10.200.0.2:9443/"))
	m := mwc(t, r)
	want := map[string]string{"gpu-pods.hami-go.io": "https://10.200.0.2:9443/mutate-pods", "gpu-rayclusters.hami-go.io": "https://10.200.0.2:9443/mutate-rayclusters"}
	for _, w := range m.Webhooks {
		if w.ClientConfig.URL == nil || *w.ClientConfig.URL != want[w.Name] || w.ClientConfig.Service != nil {
			t.Errorf("%s: clientConfig %+v, want url %s", w.Name, w.ClientConfig, want[w.Name])
		}
	}
	checkServingCert(t, r, m, []string{"hami-go-webhook.hami-go-system.svc"}, []string{"10.200.0.2"})

	r2 := renderChart(t, sets(t, "webhook.url=https://webhook.example.com:8443", "webhook.certs.mode=certManager"))
	dns := field(t, r2.get(t, "Certificate/hami-go-webhook").raw, "spec", "dnsNames").([]any)
	if dns[len(dns)-1] != "webhook.example.com" {
		t.Errorf("dnsNames %v lack the URL's host", dns)
	}
	r3 := renderChart(t, sets(t, "webhook.url=https://10.1.2.3:8443", "webhook.certs.mode=certManager"))
	if ips := field(t, r3.get(t, "Certificate/hami-go-webhook").raw, "spec", "ipAddresses").([]any); len(ips) != 1 || ips[0] != "10.1.2.3" {
		t.Errorf("ipAddresses %v", ips)
	}
}

func TestValuesLocalCluster(t *testing.T) {
	r := renderChart(t, valuesFile(t, "values-local.yaml"))
	for k, spec := range podSpecs(t, r) {
		if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			t.Errorf("%s: hostNetwork %v dnsPolicy %s", k, spec.HostNetwork, spec.DNSPolicy)
		}
		for _, c := range runningContainers(spec) {
			host, _ := envOf(c, "KUBERNETES_SERVICE_HOST")
			port, _ := envOf(c, "KUBERNETES_SERVICE_PORT")
			if host != "10.200.0.1" || port != "6443" {
				t.Errorf("%s/%s: API server %s:%s, want 10.200.0.1:6443", k, c.Name, host, port)
			}
			if c.ImagePullPolicy != corev1.PullNever {
				t.Errorf("%s/%s: pullPolicy %s, want Never", k, c.Name, c.ImagePullPolicy)
			}
		}
	}
	dp := daemonSet(t, r, dpDS).Spec.Template.Spec
	if f := flags(container(t, dp, "device-plugin")); f["--backend"] != "fake" {
		t.Errorf("backend %s", f["--backend"])
	}
	// Fake GPUs the tests recover are healthy again within seconds, in both modes (issue 27: the
	// XID tests must not sleep through 3 probes of the default 5 s).
	local := valuesFile(t, "values-local.yaml")
	local["mode"] = "dra"
	dra := daemonSet(t, renderChart(t, local), draDS).Spec.Template.Spec
	for agent, f := range map[string]map[string]string{"device-plugin": flags(container(t, dp, "device-plugin")), "dra-driver": flags(container(t, dra, "dra-driver"))} {
		if f["--probe-interval"] != "1s" || f["--recovery-probes"] != "3" {
			t.Errorf("%s: --probe-interval %q --recovery-probes %q, want 1s and 3 (recovered in about 3 s)", agent, f["--probe-interval"], f["--recovery-probes"])
		}
	}
	if len(dp.NodeSelector) != 0 {
		t.Errorf("nodeSelector %v: the local node carries only hami-go.io/fake-profile", dp.NodeSelector)
	}
	term := dp.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0]
	if term.Key != "hami-go.io/fake-profile" || term.Operator != corev1.NodeSelectorOpExists {
		t.Errorf("device plugin node affinity %+v", term)
	}
	m := mwc(t, r)
	if u := m.Webhooks[0].ClientConfig.URL; u == nil || *u != "https://10.200.0.2:9443/mutate-pods" {
		t.Errorf("webhook URL %v", u)
	}
	checkServingCert(t, r, m, nil, []string{"10.200.0.2"})
	for _, k := range []string{schedDep, webhookDep} {
		d := deployment(t, r, k)
		if *d.Spec.Replicas != 1 {
			t.Errorf("%s: %d replicas on one node with host ports", k, *d.Spec.Replicas)
		}
	}
	if r.has("PodDisruptionBudget/hami-go-webhook") {
		t.Error("PodDisruptionBudget minAvailable 1 with a single replica blocks node drains")
	}
	if !strings.Contains(r.get(t, schedCM).typed.(*corev1.ConfigMap).Data["config.yaml"], "qps: 1000") {
		t.Error("local scheduler keeps the default client rate")
	}
}

func TestValuesKind(t *testing.T) {
	r := renderChart(t, valuesFile(t, "values-kind.yaml"))
	dp := daemonSet(t, r, dpDS).Spec.Template.Spec
	if f := flags(container(t, dp, "device-plugin")); f["--backend"] != "fake" || f["--fake-profile-label"] != "hami-go.io/fake-profile" {
		t.Errorf("flags %v", f)
	}
	if !mapsEqual(dp.NodeSelector, map[string]string{"hami-go.io/device-plugin": "true"}) {
		t.Errorf("nodeSelector %v (kind-config.yaml labels the GPU workers hami-go.io/device-plugin=true)", dp.NodeSelector)
	}
	if *deployment(t, r, schedDep).Spec.Replicas != 2 {
		t.Error("kind runs two scheduler replicas (leader election)")
	}
	for k, spec := range podSpecs(t, r) {
		if spec.HostNetwork {
			t.Errorf("%s on the host network in kind", k)
		}
	}
}

func TestSelectorsMatchTheirPods(t *testing.T) {
	for name, vals := range map[string]map[string]any{"default": nil, "local": valuesFile(t, "values-local.yaml"), "mps+monitors": sets(t, "devicePlugin.enforcement=mps", "serviceMonitor.enabled=true", "scheduler.extender.bindAddress=")} {
		t.Run(name, func(t *testing.T) {
			r := renderChart(t, vals)
			podLabels := map[string]labels.Set{}
			for k, o := range r.objs {
				var sel *metav1.LabelSelector
				var tmpl map[string]string
				switch w := o.typed.(type) {
				case *appsv1.Deployment:
					sel, tmpl = w.Spec.Selector, w.Spec.Template.Labels
				case *appsv1.DaemonSet:
					sel, tmpl = w.Spec.Selector, w.Spec.Template.Labels
				default:
					continue
				}
				s, err := metav1.LabelSelectorAsSelector(sel)
				if err != nil || !s.Matches(labels.Set(tmpl)) {
					t.Errorf("%s: selector %v does not match its template labels %v", k, sel, tmpl)
				}
				podLabels[k] = tmpl
			}
			// Workload selectors are disjoint.
			for a, la := range podLabels {
				for b := range podLabels {
					if a == b {
						continue
					}
					var sel *metav1.LabelSelector
					switch w := r.objs[b].typed.(type) {
					case *appsv1.Deployment:
						sel = w.Spec.Selector
					case *appsv1.DaemonSet:
						sel = w.Spec.Selector
					}
					s, _ := metav1.LabelSelectorAsSelector(sel)
					if s.Matches(la) {
						t.Errorf("%s's selector also matches %s's pods", b, a)
					}
				}
			}
			// Each Service selects exactly one workload's pods, and its target ports exist there.
			for k, o := range r.objs {
				svc, ok := o.typed.(*corev1.Service)
				if !ok {
					continue
				}
				var matched []string
				for w, l := range podLabels {
					if labels.SelectorFromSet(svc.Spec.Selector).Matches(l) {
						matched = append(matched, w)
					}
				}
				if len(matched) != 1 {
					t.Errorf("%s selects %v, want exactly one workload", k, matched)
					continue
				}
				spec := podSpecs(t, r)[matched[0]]
				for _, p := range svc.Spec.Ports {
					found := false
					for _, c := range runningContainers(spec) { // the endpoint controllers resolve sidecars' named ports too
						found = found || namedPort(c, p.TargetPort.String()) != 0
					}
					if !found {
						t.Errorf("%s: targetPort %s is no container port of %s", k, p.TargetPort.String(), matched[0])
					}
				}
			}
			// Each ServiceMonitor selects exactly one Service with the port it scrapes.
			for k, o := range r.objs {
				if o.gvk.Kind != "ServiceMonitor" {
					continue
				}
				ml, _, _ := unstructuredStringMap(o.raw.Object, "spec", "selector", "matchLabels")
				port := field(t, o.raw, "spec", "endpoints").([]any)[0].(map[string]any)["port"]
				var hits []string
				for sk, so := range r.objs {
					if svc, ok := so.typed.(*corev1.Service); ok && labels.SelectorFromSet(ml).Matches(labels.Set(svc.Labels)) {
						if slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == port }) {
							hits = append(hits, sk)
						}
					}
				}
				if len(hits) != 1 {
					t.Errorf("%s matches Services %v with port %v, want one", k, hits, port)
				}
			}
			// ServiceAccounts the pods name exist.
			for k, spec := range podSpecs(t, r) {
				if spec.ServiceAccountName != "" && !r.has("ServiceAccount/"+spec.ServiceAccountName) {
					t.Errorf("%s uses missing ServiceAccount %s", k, spec.ServiceAccountName)
				}
			}
		})
	}
}

func TestRBACLeastPrivilege(t *testing.T) {
	r := renderChart(t, nil)
	cr := func(k string) map[string]bool { return ruleSet(typedAs[*rbacv1.ClusterRole](t, r, k).Rules) }
	role := func(k string) map[string]bool { return ruleSet(typedAs[*rbacv1.Role](t, r, k).Rules) }
	set := func(s ...string) map[string]bool {
		m := map[string]bool{}
		for _, x := range s {
			m[x] = true
		}
		return m
	}
	for _, c := range []struct {
		key  string
		got  map[string]bool
		want map[string]bool
	}{
		{"device plugin ClusterRole", cr("ClusterRole/hami-go-device-plugin"), set(
			"|pods|get", "|pods|list", "|pods|watch", "|pods|patch", "|pods|delete", "|nodes|get", "|nodes|list", "|nodes|watch", "|nodes|patch", "|nodes/status|patch", "|events|create", "|events|patch",
			"apps|daemonsets|get", "resource.k8s.io|resourceclaims|get",
			// issue 37, item 8: a mode switch from dra watches the claims allocated on the node
			"resource.k8s.io|resourceclaims|list", "resource.k8s.io|resourceclaims|watch")},
		{"device plugin Lease Role", role("Role/kube-node-lease/hami-go-device-plugin"), set(
			"coordination.k8s.io|leases|create", "coordination.k8s.io|leases|get", "coordination.k8s.io|leases|update", "coordination.k8s.io|leases|delete")},
		{"extender ClusterRole", cr("ClusterRole/hami-go-scheduler-extender"), set(
			"|pods|get", "|pods|list", "|pods|watch", "|pods|patch", "|pods/binding|create", "|nodes|get", "|nodes|list", "|nodes|watch",
			"|events|create", "|events|patch", "events.k8s.io|events|create", "events.k8s.io|events|patch")},
		{"extender Lease Role", role("Role/kube-node-lease/hami-go-scheduler-extender-leases"), set(
			"coordination.k8s.io|leases|get", "coordination.k8s.io|leases|list", "coordination.k8s.io|leases|watch")},
		{"kube-scheduler leader election", role("Role/hami-go-system/hami-go-scheduler-leader-election"), set(
			"coordination.k8s.io|leases|create", "coordination.k8s.io|leases|get|hami-go-scheduler", "coordination.k8s.io|leases|update|hami-go-scheduler",
			"coordination.k8s.io|leases|list|hami-go-scheduler", "coordination.k8s.io|leases|watch|hami-go-scheduler")},
	} {
		if !mapsEqual(c.got, c.want) {
			t.Errorf("%s: rules\n%v\nwant\n%v", c.key, sortedKeys(c.got), sortedKeys(c.want))
		}
	}
	// Bindings: each names an SA of this release and a role that exists (or a built-in one).
	builtin := map[string]bool{"system:kube-scheduler": true, "system:volume-scheduler": true, "extension-apiserver-authentication-reader": true}
	bound := map[string][]string{}
	for k, o := range r.objs {
		var ref rbacv1.RoleRef
		var subs []rbacv1.Subject
		var ns string
		switch b := o.typed.(type) {
		case *rbacv1.ClusterRoleBinding:
			ref, subs = b.RoleRef, b.Subjects
		case *rbacv1.RoleBinding:
			ref, subs, ns = b.RoleRef, b.Subjects, b.Namespace
		default:
			continue
		}
		exists := builtin[ref.Name] || r.has("ClusterRole/"+ref.Name) || r.has("Role/"+ns+"/"+ref.Name)
		if !exists {
			t.Errorf("%s binds missing %s %s", k, ref.Kind, ref.Name)
		}
		for _, s := range subs {
			if s.Kind != "ServiceAccount" || s.Namespace != releaseNamespace || !r.has("ServiceAccount/"+s.Name) {
				t.Errorf("%s: subject %+v", k, s)
			}
			bound[s.Name] = append(bound[s.Name], ref.Name)
		}
	}
	for sa, want := range map[string][]string{
		"hami-go-device-plugin": {"hami-go-device-plugin", "hami-go-device-plugin"},
		"hami-go-scheduler": {"extension-apiserver-authentication-reader", "hami-go-scheduler-extender", "hami-go-scheduler-extender-leases",
			"hami-go-scheduler-leader-election", "system:kube-scheduler", "system:volume-scheduler"},
	} {
		got := bound[sa]
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s bound to %v, want %v", sa, got, want)
		}
	}
	// The webhook reads ResourceQuotas (GPU-memory quota, issue 25) and writes the siblings of
	// quotas with HAMi's keys, with Events on their sources (issue 37 item 5).
	if got := bound["hami-go-webhook"]; !slices.Equal(got, []string{"hami-go-webhook"}) {
		t.Errorf("webhook bound to %v, want [hami-go-webhook]", got)
	}
	if got, want := cr("ClusterRole/hami-go-webhook"), set("|resourcequotas|list", "|resourcequotas|watch", "|resourcequotas|create", "|resourcequotas|update",
		"|resourcequotas|patch", "|resourcequotas|delete", "|events|create", "|events|patch"); !mapsEqual(got, want) {
		t.Errorf("webhook ClusterRole: rules %v, want %v", sortedKeys(got), sortedKeys(want))
	}
	// The Roles live where their objects are.
	for k, ns := range map[string]string{
		"RoleBinding/kube-system/hami-go-scheduler-authentication-reader": "kube-system",
		"Role/kube-node-lease/hami-go-device-plugin":                      "kube-node-lease",
	} {
		if r.get(t, k).ns != ns {
			t.Errorf("%s in %s", k, r.get(t, k).ns)
		}
	}
}

func namedPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func unstructuredStringMap(obj map[string]any, path ...string) (map[string]string, bool, error) {
	cur := any(obj)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = m[p]
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, false, nil
	}
	out := map[string]string{}
	for k, v := range m {
		out[k], _ = v.(string)
	}
	return out, true, nil
}
