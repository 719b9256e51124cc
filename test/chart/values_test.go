package chart_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	configv1 "k8s.io/kube-scheduler/config/v1"
)

// Extractors of the fields values set.
func dpFlag(name string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		return flags(container(t, daemonSet(t, r, dpDS).Spec.Template.Spec, "device-plugin"))[name]
	}
}

func draFlag(name string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		return flags(container(t, daemonSet(t, r, draDS).Spec.Template.Spec, "dra-driver"))[name]
	}
}

// hamiCoreImage is "<reference> <pullPolicy>" of a node agent's HAMi-core image volume.
func hamiCoreImage(key string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		v := imageVolume(daemonSet(t, r, key).Spec.Template.Spec)
		if v == nil {
			t.Fatalf("%s has no image volume", key)
		}
		return v.Reference + " " + string(v.PullPolicy)
	}
}

func exFlag(name string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		return flags(container(t, deployment(t, r, schedDep).Spec.Template.Spec, "extender"))[name]
	}
}

func ksFlag(name string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		return flags(container(t, deployment(t, r, schedDep).Spec.Template.Spec, "kube-scheduler"))[name]
	}
}

func whFlag(name string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		return flags(container(t, deployment(t, r, webhookDep).Spec.Template.Spec, "webhook"))[name]
	}
}

func image(key, c string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		spec := podSpecs(t, r)[key]
		ct := container(t, spec, c)
		return ct.Image + " " + string(ct.ImagePullPolicy)
	}
}

func sched(f func(s schedCfg) string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string { return f(schedCfg{schedulerConfig(t, r)}) }
}

func webhookField(f func(w webhookView) string) func(testing.TB, rendered) string {
	return func(t testing.TB, r rendered) string {
		m := mwc(t, r)
		var parts []string
		for _, w := range m.Webhooks {
			parts = append(parts, f(webhookView{w.Name, w}))
		}
		return strings.Join(parts, ";")
	}
}

func TestEveryValueChangesWhatItSays(t *testing.T) {
	cases := []struct {
		set  []string
		get  func(testing.TB, rendered) string
		want string
	}{
		// Resource names reach every binary and the scheduler configuration.
		{[]string{"resourceNames.count=example.com/vgpu"}, dpFlag("--resource-count"), "example.com/vgpu"},
		{[]string{"resourceNames.count=example.com/vgpu"}, exFlag("--resource-count"), "example.com/vgpu"},
		{[]string{"resourceNames.count=example.com/vgpu"}, whFlag("--resource-count"), "example.com/vgpu"},
		{[]string{"resourceNames.count=example.com/vgpu"}, sched(func(s schedCfg) string { return s.managed(0) }), "example.com/vgpu false"},
		{[]string{"resourceNames.count=example.com/vgpu"}, func(t testing.TB, r rendered) string {
			return daemonSet(t, r, dpDS).Spec.Template.Spec.Tolerations[0].Key
		}, "example.com/vgpu"},
		{[]string{"resourceNames.memory=example.com/vmem"}, dpFlag("--resource-memory"), "example.com/vmem"},
		{[]string{"resourceNames.memory=example.com/vmem"}, sched(func(s schedCfg) string { return s.managed(1) }), "example.com/vmem true"},
		{[]string{"resourceNames.memoryPercentage=example.com/vmem-pct"}, exFlag("--resource-memory-percentage"), "example.com/vmem-pct"},
		{[]string{"resourceNames.memoryPercentage=example.com/vmem-pct"}, sched(func(s schedCfg) string { return s.managed(2) }), "example.com/vmem-pct true"},
		{[]string{"resourceNames.cores=example.com/vcores"}, whFlag("--resource-cores"), "example.com/vcores"},
		{[]string{"resourceNames.cores=example.com/vcores"}, sched(func(s schedCfg) string { return s.managed(3) }), "example.com/vcores true"},
		{[]string{"leaseNamespace=gpu-leases"}, dpFlag("--lease-namespace"), "gpu-leases"},
		{[]string{"leaseNamespace=gpu-leases"}, exFlag("--lease-namespace"), "gpu-leases"},
		{[]string{"leaseNamespace=gpu-leases"}, func(t testing.TB, r rendered) string {
			return r.get(t, "Role/gpu-leases/hami-go-device-plugin").ns + " " + r.get(t, "RoleBinding/gpu-leases/hami-go-scheduler-extender-leases").ns
		}, "gpu-leases gpu-leases"},
		{[]string{"hostNetwork=true"}, func(t testing.TB, r rendered) string {
			return words(daemonSet(t, r, dpDS).Spec.Template.Spec.HostNetwork, deployment(t, r, schedDep).Spec.Template.Spec.HostNetwork, deployment(t, r, webhookDep).Spec.Template.Spec.HostNetwork)
		}, "true true true"},
		{[]string{"hostNetwork=true"}, func(t testing.TB, r rendered) string {
			return deployment(t, r, webhookDep).Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey
		}, "kubernetes.io/hostname"},
		// With host ports a surge replica can never start beside the old one: replace in place.
		{[]string{"hostNetwork=true"}, func(t testing.TB, r rendered) string {
			var out []string
			for _, k := range []string{schedDep, webhookDep} {
				ru := deployment(t, r, k).Spec.Strategy.RollingUpdate
				out = append(out, ru.MaxSurge.String()+"/"+ru.MaxUnavailable.String())
			}
			return strings.Join(out, " ")
		}, "0/1 0/1"},
		// scheduler.hostNetwork and webhook.hostNetwork override the global hostNetwork for their
		// Deployment: network, spread (required only on the node's network) and rollout.
		{[]string{"hostNetwork=true", "scheduler.hostNetwork=false"}, func(t testing.TB, r rendered) string {
			return words(daemonSet(t, r, dpDS).Spec.Template.Spec.HostNetwork, deployment(t, r, schedDep).Spec.Template.Spec.HostNetwork, deployment(t, r, webhookDep).Spec.Template.Spec.HostNetwork)
		}, "true false true"},
		{[]string{"hostNetwork=true", "scheduler.hostNetwork=false"}, func(t testing.TB, r rendered) string {
			d := deployment(t, r, schedDep)
			aa := d.Spec.Template.Spec.Affinity.PodAntiAffinity
			wh := deployment(t, r, webhookDep).Spec.Template.Spec.Affinity.PodAntiAffinity
			return words(len(aa.RequiredDuringSchedulingIgnoredDuringExecution), len(aa.PreferredDuringSchedulingIgnoredDuringExecution), d.Spec.Strategy.RollingUpdate == nil,
				d.Spec.Template.Spec.DNSPolicy == "", len(wh.RequiredDuringSchedulingIgnoredDuringExecution))
		}, "0 1 true true 1"},
		{[]string{"webhook.hostNetwork=true"}, func(t testing.TB, r rendered) string {
			d := deployment(t, r, webhookDep)
			ru := d.Spec.Strategy.RollingUpdate
			return words(daemonSet(t, r, dpDS).Spec.Template.Spec.HostNetwork, deployment(t, r, schedDep).Spec.Template.Spec.HostNetwork, d.Spec.Template.Spec.HostNetwork,
				d.Spec.Template.Spec.DNSPolicy, d.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey, ru.MaxSurge.String()+"/"+ru.MaxUnavailable.String())
		}, "false false true ClusterFirstWithHostNet kubernetes.io/hostname 0/1"},
		{[]string{"apiServer.host=10.9.8.7", "apiServer.port=16443"}, func(t testing.TB, r rendered) string {
			var out []string
			for _, k := range []string{dpDS, schedDep, webhookDep} {
				for _, c := range runningContainers(podSpecs(t, r)[k]) {
					h, _ := envOf(c, "KUBERNETES_SERVICE_HOST")
					p, _ := envOf(c, "KUBERNETES_SERVICE_PORT")
					out = append(out, c.Name+"="+h+":"+p)
				}
			}
			return strings.Join(out, " ")
		}, "device-plugin=10.9.8.7:16443 kube-scheduler=10.9.8.7:16443 extender=10.9.8.7:16443 webhook=10.9.8.7:16443"},
		{[]string{"imagePullSecrets[0].name=regcred"}, func(t testing.TB, r rendered) string {
			return podSpecs(t, r)[webhookDep].ImagePullSecrets[0].Name + " " + podSpecs(t, r)[dpDS].ImagePullSecrets[0].Name
		}, "regcred regcred"},
		{[]string{"fullnameOverride=gpu"}, func(t testing.TB, r rendered) string {
			return words(r.has("DaemonSet/gpu-device-plugin"), r.has("Deployment/gpu-scheduler"), r.has("Deployment/gpu-webhook"))
		}, "true true true"},
		{[]string{"commonLabels.team=ml"}, func(t testing.TB, r rendered) string { return daemonSet(t, r, dpDS).Labels["team"] }, "ml"},
		{[]string{"clusterDomain=corp.local", "webhook.certs.mode=certManager"}, func(t testing.TB, r rendered) string {
			return words(field(t, r.get(t, "Certificate/hami-go-webhook").raw, "spec", "dnsNames").([]any)[3])
		}, "hami-go-webhook.hami-go-system.svc.corp.local"},

		// Device plugin.
		{[]string{"devicePlugin.enabled=false"}, func(t testing.TB, r rendered) string {
			return words(r.has(dpDS), r.has("ClusterRole/hami-go-device-plugin"))
		}, "false false"},
		{[]string{"devicePlugin.image.repository=reg.example.com/dp", "devicePlugin.image.tag=dev", "devicePlugin.image.pullPolicy=Always"}, image(dpDS, "device-plugin"), "reg.example.com/dp:dev Always"},
		{[]string{"devicePlugin.backend=fake"}, dpFlag("--backend"), "fake"},
		{[]string{"devicePlugin.splitCount=4"}, dpFlag("--split-count"), "4"},
		{[]string{"devicePlugin.memoryScaling=1.5"}, dpFlag("--memory-scaling"), "1.5"},
		{[]string{"devicePlugin.enforcement=none"}, dpFlag("--enforcement"), "none"},
		// With the fake backend, whose "" means envvar (the case below), the value picks cdi.
		{[]string{"devicePlugin.backend=fake", "devicePlugin.deviceListStrategy=cdi"}, func(t testing.TB, r rendered) string {
			return dpFlag("--device-list-strategy")(t, r) + " " + dpFlag("--backend")(t, r)
		}, "cdi fake"},
		// case C37: "" = cdi for real GPUs, envvar for fake ones (no device nodes, no CDI in containerd 1.6).
		{[]string{"devicePlugin.backend=fake"}, func(t testing.TB, r rendered) string {
			return dpFlag("--device-list-strategy")(t, r) + " " + words(hostPaths(daemonSet(t, r, dpDS).Spec.Template.Spec)["cdi"] == "")
		}, "envvar true"},
		// case C41.
		{[]string{"devicePlugin.reservedMemory=2048\\,GPU-a=1Gi"}, dpFlag("--reserved-memory"), "2048,GPU-a=1Gi"},
		{[]string{"devicePlugin.deviceListStrategy=cdi", "devicePlugin.cdiSpecDir=/etc/cdi"}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, dpDS).Spec.Template.Spec
			return flags(container(t, spec, "device-plugin"))["--cdi-spec-dir"] + " " + hostPaths(spec)["cdi"] + " " + mounts(container(t, spec, "device-plugin"))["/etc/cdi"]
		}, "/etc/cdi /etc/cdi cdi"},
		// case C53: the driver root's /dev is the CDI spec's hostPath, seen by the plugin at
		// /host<driverRoot>/dev (pkg/deviceplugin run.go).
		{[]string{"devicePlugin.driverRoot=/run/nvidia/driver"}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, dpDS).Spec.Template.Spec
			c := container(t, spec, "device-plugin")
			return words(dpFlag("--driver-root")(t, r), hostPaths(spec)["driver-dev"], mounts(c)["/host/run/nvidia/driver/dev"], readOnly(c, "driver-dev"))
		}, "/run/nvidia/driver /run/nvidia/driver/dev driver-dev true"},
		// case C55: the toolkit's CDI kind, in both agents; "" names none and reads no host spec.
		{[]string{"devicePlugin.toolkitCDIKind=example.com/gpu"}, dpFlag("--toolkit-cdi-kind"), "example.com/gpu"},
		{[]string{"mode=dra", "devicePlugin.toolkitCDIKind=example.com/gpu"}, draFlag("--toolkit-cdi-kind"), "example.com/gpu"},
		{[]string{"devicePlugin.toolkitCDIKind="}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, dpDS).Spec.Template.Spec
			k, has := flags(container(t, spec, "device-plugin"))["--toolkit-cdi-kind"]
			_, cdi := hostPaths(spec)["host-cdi"]
			return words(k == "", has, cdi)
		}, "true true false"},
		{[]string{"mode=dra", "devicePlugin.toolkitCDIKind="}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, draDS).Spec.Template.Spec
			k, has := flags(container(t, spec, "dra-driver"))["--toolkit-cdi-kind"]
			_, cdi := hostPaths(spec)["host-cdi"]
			return words(k == "", has, cdi)
		}, "true true false"},
		{[]string{"hamiCore.install=false", "devicePlugin.hamiCoreLibrary=/opt/hami/libvgpu.so"}, func(t testing.TB, r rendered) string {
			return dpFlag("--hami-core-library")(t, r) + " " + hostPaths(daemonSet(t, r, dpDS).Spec.Template.Spec)["hami-core"]
		}, "/opt/hami/libvgpu.so /opt/hami"},
		{[]string{`devicePlugin.applicationXids=13\,31`}, dpFlag("--application-xids"), "13,31"},
		{[]string{"devicePlugin.recoveryProbes=5"}, dpFlag("--recovery-probes"), "5"},
		{[]string{"devicePlugin.probeInterval=9s"}, dpFlag("--probe-interval"), "9s"},
		// A mode switch's drain runs inside the agents' termination grace period (issue 28).
		{[]string{"devicePlugin.drainTimeout=600"}, func(t testing.TB, r rendered) string {
			return dpFlag("--drain-timeout")(t, r) + " " + words(*daemonSet(t, r, dpDS).Spec.Template.Spec.TerminationGracePeriodSeconds)
		}, "600s 630"},
		{[]string{"mode=dra", "devicePlugin.drainTimeout=0"}, func(t testing.TB, r rendered) string {
			return draFlag("--drain-timeout")(t, r) + " " + words(*daemonSet(t, r, draDS).Spec.Template.Spec.TerminationGracePeriodSeconds)
		}, "0s 30"},
		// Its own port, for both agents on one node's network during a mode switch; null follows
		// devicePlugin.metricsPort.
		{[]string{"mode=dra", "draDriver.metricsPort=9401"}, func(t testing.TB, r rendered) string {
			return draFlag("--metrics-address")(t, r) + " " + words(namedPort(container(t, daemonSet(t, r, draDS).Spec.Template.Spec, "dra-driver"), "metrics"))
		}, ":9401 9401"},
		{[]string{"mode=dra", "devicePlugin.metricsPort=9500"}, draFlag("--metrics-address"), ":9500"},
		{[]string{"devicePlugin.planWait=3s"}, dpFlag("--plan-wait"), "3s"},
		{[]string{"devicePlugin.kubeletDir=/data/kubelet"}, func(t testing.TB, r rendered) string {
			return dpFlag("--device-plugin-dir")(t, r) + " " + hostPaths(daemonSet(t, r, dpDS).Spec.Template.Spec)["device-plugins"]
		}, "/data/kubelet/device-plugins /data/kubelet/device-plugins"},
		// case C37: the NRI plugin's socket, and its directory mounted from the host.
		{[]string{"devicePlugin.nriSocket=/run/containerd/nri/nri.sock"}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, dpDS).Spec.Template.Spec
			return dpFlag("--nri-socket")(t, r) + " " + hostPaths(spec)["nri"] + " " + mounts(container(t, spec, "device-plugin"))["/run/containerd/nri"]
		}, "/run/containerd/nri/nri.sock /run/containerd/nri nri"},
		// mode dra: the DRA driver's NRI plugin is optional; "" runs none and mounts nothing.
		{[]string{"mode=dra", "devicePlugin.nriSocket="}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, draDS).Spec.Template.Spec
			_, has := hostPaths(spec)["nri"]
			return words(flags(container(t, spec, "dra-driver"))["--nri-socket"] == "", has)
		}, "true false"},
		{[]string{"devicePlugin.metricsPort=9500"}, func(t testing.TB, r rendered) string {
			return dpFlag("--metrics-address")(t, r) + " " + words(namedPort(container(t, daemonSet(t, r, dpDS).Spec.Template.Spec, "device-plugin"), "metrics"))
		}, ":9500 9500"},
		{[]string{"devicePlugin.logLevel=5"}, dpFlag("-v"), "5"},
		{[]string{"devicePlugin.nodeSelector.pool=gpu"}, func(t testing.TB, r rendered) string {
			return words(daemonSet(t, r, dpDS).Spec.Template.Spec.NodeSelector)
		}, "map[hami-go.io/device-plugin:true pool:gpu]"},
		{[]string{"devicePlugin.tolerations[0].key=gpu-only", "devicePlugin.tolerations[0].operator=Exists"}, func(t testing.TB, r rendered) string {
			tl := daemonSet(t, r, dpDS).Spec.Template.Spec.Tolerations
			return words(len(tl), tl[1].Key)
		}, "2 gpu-only"},
		{[]string{"devicePlugin.priorityClassName=gpu-critical"}, func(t testing.TB, r rendered) string {
			return daemonSet(t, r, dpDS).Spec.Template.Spec.PriorityClassName
		}, "gpu-critical"},
		{[]string{"devicePlugin.runtimeClassName=nvidia"}, func(t testing.TB, r rendered) string {
			return *daemonSet(t, r, dpDS).Spec.Template.Spec.RuntimeClassName
		}, "nvidia"},
		{[]string{"devicePlugin.privileged=true"}, func(t testing.TB, r rendered) string {
			return words(*container(t, daemonSet(t, r, dpDS).Spec.Template.Spec, "device-plugin").SecurityContext.Privileged)
		}, "true"},
		{[]string{"devicePlugin.resources.limits.memory=1Gi"}, func(t testing.TB, r rendered) string {
			lim := container(t, daemonSet(t, r, dpDS).Spec.Template.Spec, "device-plugin").Resources.Limits
			return lim.Memory().String()
		}, "1Gi"},
		{[]string{"devicePlugin.podAnnotations.a=b"}, func(t testing.TB, r rendered) string {
			return daemonSet(t, r, dpDS).Spec.Template.Annotations["a"]
		}, "b"},
		{[]string{"devicePlugin.extraArgs[0]=--foo=bar"}, dpFlag("--foo"), "bar"},
		{[]string{"devicePlugin.enforcement=mps", "devicePlugin.mps.logDir=/var/log/mps2", "devicePlugin.mps.image.repository=cuda", "devicePlugin.mps.image.tag=12"}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, mpsDS).Spec.Template.Spec
			return hostPaths(spec)["mps-log"] + " " + container(t, spec, "mps-control-daemon").Image
		}, "/var/log/mps2 cuda:12"},

		// HAMi-core, installed by the node agents (deviceplugin and dra modes).
		{[]string{"hamiCore.install=false"}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, dpDS).Spec.Template.Spec
			c := container(t, spec, "device-plugin")
			_, install := flags(c)["--hami-core-install-from"]
			return words(imageVolume(spec) != nil, install, flags(c)["--hami-core-library"], hostPaths(spec)["hami-core"], readOnly(c, "hami-core"))
		}, "false false /usr/local/vgpu/libvgpu.so /usr/local/vgpu true"},
		{[]string{"mode=dra", "hamiCore.install=false"}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, draDS).Spec.Template.Spec
			return words(imageVolume(spec) != nil, flags(container(t, spec, "dra-driver"))["--hami-core-library"])
		}, "false /usr/local/vgpu/libvgpu.so"},
		{[]string{"hamiCore.image.repository=reg.example.com/hamicore"}, hamiCoreImage(dpDS), "reg.example.com/hamicore:v2.10.0 IfNotPresent"},
		{[]string{"hamiCore.image.tag=v2.11.0"}, hamiCoreImage(dpDS), "docker.io/projecthami/hamicore:v2.11.0 IfNotPresent"},
		{[]string{"hamiCore.image.digest=sha256:" + strings.Repeat("ab", 32)}, hamiCoreImage(dpDS), "docker.io/projecthami/hamicore:v2.10.0@sha256:" + strings.Repeat("ab", 32) + " IfNotPresent"},
		{[]string{"hamiCore.image.tag=", "hamiCore.image.digest=sha256:" + strings.Repeat("0f", 32)}, hamiCoreImage(dpDS), "docker.io/projecthami/hamicore@sha256:" + strings.Repeat("0f", 32) + " IfNotPresent"},
		{[]string{"hamiCore.image.pullPolicy=Always"}, hamiCoreImage(dpDS), "docker.io/projecthami/hamicore:v2.10.0 Always"},
		{[]string{"mode=dra", "hamiCore.image.tag=v2.11.0", "hamiCore.image.pullPolicy=Always"}, hamiCoreImage(draDS), "docker.io/projecthami/hamicore:v2.11.0 Always"},
		{[]string{"hamiCore.libraryPath=lib/libvgpu.so.v2"}, dpFlag("--hami-core-install-glob"), "lib/libvgpu.so.v2"},
		{[]string{"mode=dra", "hamiCore.libraryPath=lib/libvgpu.so.v2"}, draFlag("--hami-core-install-glob"), "lib/libvgpu.so.v2"},
		{[]string{"hamiCore.hostDir=/opt/vgpu"}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, dpDS).Spec.Template.Spec
			c := container(t, spec, "device-plugin")
			return words(flags(c)["--hami-core-host-dir"], flags(c)["--hami-core-cache-dir"], hostPaths(spec)["hami-core"], mounts(c)["/opt/vgpu"], readOnly(c, "hami-core"))
		}, "/opt/vgpu /opt/vgpu/containers /opt/vgpu hami-core false"},
		{[]string{"mode=dra", "hamiCore.hostDir=/opt/vgpu"}, func(t testing.TB, r rendered) string {
			spec := daemonSet(t, r, draDS).Spec.Template.Spec
			c := container(t, spec, "dra-driver")
			return words(flags(c)["--hami-core-host-dir"], flags(c)["--hami-core-cache-dir"], hostPaths(spec)["hami-core"], mounts(c)["/opt/vgpu"], readOnly(c, "hami-core"))
		}, "/opt/vgpu /opt/vgpu/containers /opt/vgpu hami-core false"},

		// Scheduler.
		{[]string{"scheduler.enabled=false"}, func(t testing.TB, r rendered) string {
			return words(r.has(schedDep), r.has(schedCM), r.has("ClusterRole/hami-go-scheduler-extender"))
		}, "false false false"},
		{[]string{"scheduler.name=gpu-sched"}, func(t testing.TB, r rendered) string {
			s := schedulerConfig(t, r)
			return *s.Profiles[0].SchedulerName + " " + s.LeaderElection.ResourceName + " " + exFlag("--scheduler-name")(t, r) + " " + whFlag("--scheduler-name")(t, r)
		}, "gpu-sched gpu-sched gpu-sched gpu-sched"},
		{[]string{"scheduler.name=gpu-sched"}, func(t testing.TB, r rendered) string {
			return sortedKeys(ruleSet(typedAs[*rbacv1.Role](t, r, "Role/hami-go-system/hami-go-scheduler-leader-election").Rules))[1]
		}, "coordination.k8s.io|leases|get|gpu-sched"},
		{[]string{"scheduler.replicas=3"}, func(t testing.TB, r rendered) string { return words(*deployment(t, r, schedDep).Spec.Replicas) }, "3"},
		{[]string{"scheduler.clientConnection.qps=200", "scheduler.clientConnection.burst=400"}, sched(func(s schedCfg) string {
			return words(s.c.ClientConnection.QPS, s.c.ClientConnection.Burst)
		}), "200 400"},
		{[]string{"scheduler.percentageOfNodesToScore=40"}, sched(func(s schedCfg) string { return words(*s.c.PercentageOfNodesToScore) }), "40"},
		{[]string{"scheduler.kubeScheduler.image.tag=v1.38.0"}, image(schedDep, "kube-scheduler"), "registry.k8s.io/kube-scheduler:v1.38.0 IfNotPresent"},
		{[]string{"scheduler.kubeScheduler.securePort=11259"}, ksFlag("--secure-port"), "11259"},
		{[]string{"scheduler.kubeScheduler.logLevel=4"}, ksFlag("-v"), "4"},
		{[]string{"scheduler.kubeScheduler.extraArgs[0]=--feature-gates=X=true"}, ksFlag("--feature-gates"), "X=true"},
		{[]string{"scheduler.extender.image.repository=reg.example.com/ex"}, image(schedDep, "extender"), "reg.example.com/ex:0.1.0 IfNotPresent"},
		{[]string{"scheduler.extender.port=9999"}, func(t testing.TB, r rendered) string {
			return exFlag("--address")(t, r) + " " + schedulerConfig(t, r).Extenders[0].URLPrefix
		}, "127.0.0.1:9999 https://127.0.0.1:9999"},
		{[]string{"scheduler.extender.metricsPort=9500"}, func(t testing.TB, r rendered) string {
			ex := container(t, deployment(t, r, schedDep).Spec.Template.Spec, "extender")
			svc := typedAs[*corev1.Service](t, r, "Service/hami-go-scheduler")
			return words(exFlag("--metrics-address")(t, r), ex.Ports[0].ContainerPort, svc.Spec.Ports[0].Port)
		}, ":9500 9500 9500"},
		{[]string{"scheduler.extender.nodePolicy=spread"}, exFlag("--node-policy"), "spread"},
		{[]string{"scheduler.extender.gpuPolicy=spread"}, exFlag("--gpu-policy"), "spread"},
		{[]string{"scheduler.extender.inventoryStaleAfter=2m"}, exFlag("--inventory-stale-after"), "2m"},
		{[]string{"scheduler.extender.preemption=verb"}, exFlag("--preemption"), "verb"},
		{[]string{"scheduler.extender.preemption=none"}, exFlag("--preemption"), "none"},
		{[]string{"scheduler.extender.httpTimeout=12s"}, sched(func(s schedCfg) string { return s.c.Extenders[0].HTTPTimeout.Duration.String() }), "12s"},
		{[]string{"scheduler.extender.weight=3"}, sched(func(s schedCfg) string { return words(s.c.Extenders[0].Weight) }), "3"},
		// case C36: the extender's client-certificate guard, and the allocation policy.
		{[]string{"scheduler.extender.tls.enabled=false"}, func(t testing.TB, r rendered) string {
			return words(exFlag("--client-ca-file")(t, r) == "", schedulerConfig(t, r).Extenders[0].URLPrefix, r.has("Secret/hami-go-scheduler-extender-tls"))
		}, "true http://127.0.0.1:8888 false"},
		{[]string{"scheduler.extender.tls.validityDays=2"}, func(t testing.TB, r rendered) string {
			b, _ := pem.Decode(typedAs[*corev1.Secret](t, r, "Secret/hami-go-scheduler-extender-tls").Data["client.crt"])
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c.NotAfter.Sub(c.NotBefore).Round(time.Hour).String()
		}, "48h0m0s"},
		{[]string{"allocationPolicy.enabled=false"}, func(t testing.TB, r rendered) string {
			return words(r.has("ValidatingAdmissionPolicy/hami-go-allocation-records"), r.has("ValidatingAdmissionPolicyBinding/hami-go-allocation-records"),
				r.has("ValidatingAdmissionPolicy/hami-go-gpu-claims"), r.has("ValidatingAdmissionPolicyBinding/hami-go-gpu-claims"),
				r.has("ValidatingAdmissionPolicy/hami-go-cdi-annotations"), r.has("ValidatingAdmissionPolicyBinding/hami-go-cdi-annotations"))
		}, "false false false false false false"},
		{[]string{"allocationPolicy.extraClaimWriters[0]=my-kcm"}, func(t testing.TB, r rendered) string {
			return typedAs[*admissionv1.ValidatingAdmissionPolicy](t, r, "ValidatingAdmissionPolicy/hami-go-gpu-claims").Spec.MatchConditions[1].Expression
		}, `!(request.userInfo.username in ["system:serviceaccount:hami-go-system:hami-go-webhook","system:kube-controller-manager","system:serviceaccount:kube-system:resource-claim-controller","system:kube-scheduler","my-kcm"])`},
		{[]string{"allocationPolicy.extraWriters[0]=ops"}, func(t testing.TB, r rendered) string {
			return typedAs[*admissionv1.ValidatingAdmissionPolicy](t, r, "ValidatingAdmissionPolicy/hami-go-allocation-records").Spec.MatchConditions[0].Expression
		}, `!(request.userInfo.username in ["system:serviceaccount:hami-go-system:hami-go-scheduler","system:serviceaccount:hami-go-system:hami-go-device-plugin","ops"])`},
		{[]string{"scheduler.extender.logLevel=6"}, exFlag("-v"), "6"},
		{[]string{"scheduler.nodeSelector.role=infra"}, func(t testing.TB, r rendered) string {
			return deployment(t, r, schedDep).Spec.Template.Spec.NodeSelector["role"]
		}, "infra"},
		{[]string{"scheduler.priorityClassName=system-cluster-critical"}, func(t testing.TB, r rendered) string {
			return deployment(t, r, schedDep).Spec.Template.Spec.PriorityClassName
		}, "system-cluster-critical"},

		// Webhook.
		{[]string{"webhook.enabled=false"}, func(t testing.TB, r rendered) string {
			return words(r.has(webhookDep), r.has(webhookMWC), r.has(webhookSec))
		}, "false false false"},
		{[]string{"webhook.replicas=3"}, func(t testing.TB, r rendered) string { return words(*deployment(t, r, webhookDep).Spec.Replicas) }, "3"},
		{[]string{"webhook.image.tag=dev"}, image(webhookDep, "webhook"), "docker.io/hami-go/webhook:dev IfNotPresent"},
		{[]string{"webhook.port=10443"}, func(t testing.TB, r rendered) string {
			return whFlag("--port")(t, r) + " " + words(namedPort(container(t, deployment(t, r, webhookDep).Spec.Template.Spec, "webhook"), "https"))
		}, "10443 10443"},
		{[]string{"webhook.healthPort=18081"}, whFlag("--health-address"), ":18081"},
		{[]string{"webhook.metricsPort=18080"}, whFlag("--metrics-address"), ":18080"},
		{[]string{"webhook.failurePolicy=Ignore"}, webhookField(func(w webhookView) string { return string(*w.w.FailurePolicy) }), "Ignore;Ignore"},
		{[]string{"webhook.timeoutSeconds=5"}, webhookField(func(w webhookView) string { return words(*w.w.TimeoutSeconds) }), "5;5"},
		{[]string{"webhook.excludeNamespaces={ops,kube-system}"}, webhookField(func(w webhookView) string {
			return strings.Join(w.w.NamespaceSelector.MatchExpressions[0].Values, ",")
		}), "hami-go-system,ops,kube-system;hami-go-system,ops,kube-system"},
		// case C37: the NRI plugin exempts the namespaces the webhook does not see.
		{[]string{"webhook.excludeNamespaces={ops,kube-system}"}, dpFlag("--nri-exempt-namespaces"), "hami-go-system,ops,kube-system"},
		{[]string{"webhook.podOperations={CREATE,UPDATE}"}, webhookField(func(w webhookView) string { return words(w.w.Rules[0].Operations) }), "[CREATE UPDATE];[CREATE UPDATE]"},
		{[]string{"webhook.rayCluster.enabled=false"}, webhookField(func(w webhookView) string { return w.name }), "gpu-pods.hami-go.io"},
		{[]string{"webhook.rayCluster.operations={CREATE}"}, webhookField(func(w webhookView) string { return words(w.w.Rules[0].Operations) }), "[CREATE];[CREATE]"},
		{[]string{"webhook.privileged=ignore"}, whFlag("--privileged"), "ignore"},
		{[]string{"webhook.resourceAnnotations=warn"}, whFlag("--resource-annotations"), "warn"}, // case C39
		{[]string{"webhook.rayGPUResources=nvidia.com/gpu"}, whFlag("--ray-gpu-resources"), "nvidia.com/gpu"},
		{[]string{"webhook.rayMemoryResource=vram_mib"}, whFlag("--ray-memory-resource"), "vram_mib"},
		{[]string{"webhook.logLevel=3"}, whFlag("-v"), "3"},
		{[]string{"webhook.rayAcceleratorLabel=gpu-model"}, whFlag("--ray-accelerator-label"), "gpu-model"},
		{[]string{"webhook.extraArgs[0]=--x=y"}, whFlag("--x"), "y"},
		{[]string{"mode=dra", "webhook.draSchedulerName=hami-go-packed"}, whFlag("--dra-scheduler-name"), "hami-go-packed"},
		{[]string{"webhook.gpuMemoryNodeAffinity=true"}, whFlag("--gpu-memory-node-affinity"), "true"},
		{[]string{"clusterAutoscaler.schedulerConfig=true", "clusterAutoscaler.namespace=kube-system"}, func(t testing.TB, r rendered) string {
			return typedAs[*corev1.ConfigMap](t, r, caCM).Namespace
		}, "kube-system"},
		{[]string{"webhook.nodeSelector.role=infra"}, func(t testing.TB, r rendered) string {
			return deployment(t, r, webhookDep).Spec.Template.Spec.NodeSelector["role"]
		}, "infra"},
		{[]string{"webhook.tolerations[0].key=infra", "webhook.tolerations[0].operator=Exists"}, func(t testing.TB, r rendered) string {
			return deployment(t, r, webhookDep).Spec.Template.Spec.Tolerations[0].Key
		}, "infra"},
		{[]string{"webhook.podAnnotations.a=b"}, func(t testing.TB, r rendered) string {
			return deployment(t, r, webhookDep).Spec.Template.Annotations["a"]
		}, "b"},
		{[]string{"webhook.certs.secretName=my-tls"}, func(t testing.TB, r rendered) string {
			return words(r.has("Secret/my-tls"), deployment(t, r, webhookDep).Spec.Template.Spec.Volumes[0].Secret.SecretName)
		}, "true my-tls"},
		{[]string{"webhook.certs.mode=secret", "webhook.certs.secretName=corp-tls", "webhook.certs.caBundle=Q0E="}, func(t testing.TB, r rendered) string {
			return words(r.has(webhookSec), string(mwc(t, r).Webhooks[0].ClientConfig.CABundle))
		}, "false CA"},
		{[]string{"webhook.certs.mode=certManager", "webhook.certs.certManager.duration=100h", "webhook.certs.certManager.renewBefore=10h"}, func(t testing.TB, r rendered) string {
			c := r.get(t, "Certificate/hami-go-webhook").raw
			return words(field(t, c, "spec", "duration"), field(t, c, "spec", "renewBefore"))
		}, "100h 10h"},
		{[]string{"webhook.certs.validityDays=30"}, func(t testing.TB, r rendered) string {
			c := servingCert(t, r)
			return words(c.NotAfter.Sub(c.NotBefore).Hours() / 24)
		}, "30"},

		// Monitoring.
		{[]string{"serviceMonitor.enabled=true", "serviceMonitor.interval=15s", "serviceMonitor.labels.release=prom"}, func(t testing.TB, r rendered) string {
			o := r.get(t, "ServiceMonitor/hami-go-device-plugin").raw
			return words(field(t, o, "spec", "endpoints").([]any)[0].(map[string]any)["interval"], o.GetLabels()["release"], r.has("ServiceMonitor/hami-go-webhook"), r.has("ServiceMonitor/hami-go-scheduler"))
		}, "15s prom true true"},
		// The device plugin's and the extender's series keep their own node, namespace, pod and
		// container labels (the slices'); the webhook's have none of them.
		{[]string{"serviceMonitor.enabled=true"}, func(t testing.TB, r rendered) string {
			var out []any
			for _, name := range []string{"hami-go-device-plugin", "hami-go-scheduler", "hami-go-webhook"} {
				out = append(out, field(t, r.get(t, "ServiceMonitor/"+name).raw, "spec", "endpoints").([]any)[0].(map[string]any)["honorLabels"])
			}
			return words(out...)
		}, "true true <nil>"},
		// Mode dra: the DRA driver's per-claim series keep the claims' namespace.
		{[]string{"serviceMonitor.enabled=true", "mode=dra"}, func(t testing.TB, r rendered) string {
			return words(field(t, r.get(t, "ServiceMonitor/hami-go-dra-driver").raw, "spec", "endpoints").([]any)[0].(map[string]any)["honorLabels"])
		}, "true"},
		// The extender's ServiceMonitor scrapes its metrics port, whatever --address is.
		{[]string{"serviceMonitor.enabled=true"}, func(t testing.TB, r rendered) string {
			o := r.get(t, "ServiceMonitor/hami-go-scheduler").raw
			return words(field(t, o, "spec", "endpoints").([]any)[0].(map[string]any)["port"], exFlag("--address")(t, r))
		}, "metrics 127.0.0.1:8888"},
		{[]string{"dashboard.enabled=false"}, func(t testing.TB, r rendered) string { return words(r.has("ConfigMap/hami-go-dashboard")) }, "false"},
		{[]string{"dashboard.labels.dash=yes"}, func(t testing.TB, r rendered) string {
			return typedAs[*corev1.ConfigMap](t, r, "ConfigMap/hami-go-dashboard").Labels["dash"]
		}, "yes"},
	}
	defaults := renderChart(t, nil)
	for _, c := range cases {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			if got := c.get(t, renderChart(t, sets(t, c.set...))); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
			// The defaults give something else (or lack the field), so the value is what changed it.
			if def, ok := tryGet(t, c.get, defaults); ok && def == c.want {
				t.Errorf("the defaults already give %q: the case proves nothing", def)
			}
		})
	}
}

// probeTB turns a failing extractor into a "no value" answer instead of a test failure.
type probeTB struct {
	testing.TB
}

type probeFailed struct{}

func (probeTB) Helper()               {}
func (probeTB) Fatalf(string, ...any) { panic(probeFailed{}) }
func (probeTB) Fatal(...any)          { panic(probeFailed{}) }
func (probeTB) Errorf(string, ...any) { panic(probeFailed{}) }

// tryGet runs get on r; ok is false when get could not find its field.
func tryGet(t testing.TB, get func(testing.TB, rendered) string, r rendered) (v string, ok bool) {
	defer func() {
		// probeFailed, or a runtime error of an extractor indexing a field the defaults lack.
		if p := recover(); p != nil {
			v, ok = "", false
		}
	}()
	return get(probeTB{t}, r), true
}

// schedCfg wraps the decoded scheduler configuration for the table.
type schedCfg struct {
	c configv1.KubeSchedulerConfiguration
}

// managed is "<name> <ignoredByScheduler>" of the extender's i-th managed resource.
func (s schedCfg) managed(i int) string {
	m := s.c.Extenders[0].ManagedResources[i]
	return words(m.Name, m.IgnoredByScheduler)
}

type webhookView struct {
	name string
	w    admissionv1.MutatingWebhook
}

// servingCert parses the generated serving certificate.
func servingCert(t testing.TB, r rendered) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(typedAs[*corev1.Secret](t, r, webhookSec).Data["tls.crt"])
	if blk == nil {
		t.Fatal("tls.crt is not PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// words joins its operands with single spaces.
func words(a ...any) string { return strings.TrimSuffix(fmt.Sprintln(a...), "\n") }
