package chart_test

import (
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// Object keys of the default release (release name hami-go).
const (
	dpDS       = "DaemonSet/hami-go-device-plugin"
	mpsDS      = "DaemonSet/hami-go-mps-control-daemon"
	schedDep   = "Deployment/hami-go-scheduler"
	schedCM    = "ConfigMap/hami-go-scheduler"
	caCM       = "ConfigMap/hami-go-cluster-autoscaler-scheduler-config"
	webhookDep = "Deployment/hami-go-webhook"
	webhookMWC = "MutatingWebhookConfiguration/hami-go-webhook"
	webhookSec = "Secret/hami-go-webhook-tls"
	webhookSvc = "Service/hami-go-webhook"
)

func daemonSet(t testing.TB, r rendered, key string) *appsv1.DaemonSet {
	t.Helper()
	return typedAs[*appsv1.DaemonSet](t, r, key)
}

func deployment(t testing.TB, r rendered, key string) *appsv1.Deployment {
	t.Helper()
	return typedAs[*appsv1.Deployment](t, r, key)
}

func mwc(t testing.TB, r rendered) *admissionv1.MutatingWebhookConfiguration {
	t.Helper()
	return typedAs[*admissionv1.MutatingWebhookConfiguration](t, r, webhookMWC)
}

// container returns the container named name of a pod spec: a regular container or a native
// sidecar (sidecars).
func container(t testing.TB, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range runningContainers(spec) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

// sidecars returns a pod spec's native sidecars: its init containers with restartPolicy Always,
// which run beside the regular containers for the pod's life.
func sidecars(spec corev1.PodSpec) []corev1.Container {
	var out []corev1.Container
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out = append(out, c)
		}
	}
	return out
}

// runningContainers returns the containers that run for a pod's life: its regular containers,
// then its native sidecars.
func runningContainers(spec corev1.PodSpec) []corev1.Container {
	return append(append([]corev1.Container(nil), spec.Containers...), sidecars(spec)...)
}

// flags parses "--name=value" arguments (and command entries) into a map; "--flag" alone maps to "".
func flags(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		k, v, _ := strings.Cut(a, "=")
		m[k] = v
	}
	return m
}

// envOf returns the env var's literal value, or "fieldRef:<path>", and whether it is set.
func envOf(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return "fieldRef:" + e.ValueFrom.FieldRef.FieldPath, true
		}
		return e.Value, true
	}
	return "", false
}

// hostPaths maps volume names to hostPath paths.
func hostPaths(spec corev1.PodSpec) map[string]string {
	m := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			m[v.Name] = v.HostPath.Path
		}
	}
	return m
}

// imageVolume returns the pod's "hami-core-image" image volume, or nil.
func imageVolume(spec corev1.PodSpec) *corev1.ImageVolumeSource {
	for _, v := range spec.Volumes {
		if v.Name == "hami-core-image" {
			return v.Image
		}
	}
	return nil
}

// readOnly reports whether the container mounts the volume read-only ("absent" when it does not
// mount it).
func readOnly(c corev1.Container, volume string) string {
	for _, vm := range c.VolumeMounts {
		if vm.Name == volume {
			return strconv.FormatBool(vm.ReadOnly)
		}
	}
	return "absent"
}

// mounts maps mount paths to volume names for a container.
func mounts(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, vm := range c.VolumeMounts {
		m[vm.MountPath] = vm.Name
	}
	return m
}

// podSpecs returns every workload's pod spec by object key.
func podSpecs(t testing.TB, r rendered) map[string]corev1.PodSpec {
	t.Helper()
	out := map[string]corev1.PodSpec{}
	for k, o := range r.objs {
		switch w := o.typed.(type) {
		case *appsv1.Deployment:
			out[k] = w.Spec.Template.Spec
		case *appsv1.DaemonSet:
			out[k] = w.Spec.Template.Spec
		}
	}
	return out
}

// rules returns a role's rules as "group|resource|verb" strings (one per combination).
func ruleSet(rules []rbacv1.PolicyRule) map[string]bool {
	m := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					k := g + "|" + res + "|" + v
					if len(r.ResourceNames) > 0 {
						k += "|" + strings.Join(r.ResourceNames, ",")
					}
					m[k] = true
				}
			}
		}
	}
	return m
}

func itoa(i int) string { return strconv.Itoa(i) }

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
