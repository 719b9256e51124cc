package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/pkg/device"
)

// The bench must not depend on what the cluster has installed (issue 38). Two things of
// hami-go's chart would change what it measures:
//   - the mutating webhook rewrites GPU pods (device-plugin mode: adds hami-go.io/gpu-memory and
//     may add a node affinity; DRA mode: turns the limits into ResourceClaims the simulated
//     nodes cannot serve). The bench's pods live in --namespace (hami-go-bench), which the local
//     cluster's chart values exclude from the webhook (charts/hami-go/values-local.yaml,
//     webhook.excludeNamespaces: the chart's documented opt-out for namespaces; the release
//     namespace is always excluded, and a pod label would not do: the chart's
//     ValidatingAdmissionPolicy refuses slice resources on pods labelled hami-go.io/ignore=true,
//     case C49);
//   - the allocation-records ValidatingAdmissionPolicy (allocationPolicy, case C36) lets only
//     hami-go's scheduler and device plugin ServiceAccounts write hami-go.io/allocation-*, which
//     the bench's extender writes on every bind: --extender-as makes its API client impersonate
//     the chart's scheduler ServiceAccount.
// checkAdmission finds both before any node is made, with a dry-run create of an extender pod
// and a dry-run annotation patch by the extender's client, so that a cluster that would rewrite
// or refuse the bench's pods fails at once, saying why, instead of binding none of them.

// checkAdmission reports how the cluster's admission would change or refuse the bench's pods
// in cfg.Namespace (which must exist): the pods of every variant are created with dry run and
// compared with what was sent, and ext (the extender's client) patches a pod's
// hami-go.io/allocation-planned annotation with dry run.
func checkAdmission(ctx context.Context, cs, ext kubernetes.Interface, cfg Config) error {
	for _, v := range variants(cfg) {
		// A DRA pod names its variant's claim template, which need not exist for a dry run.
		want := benchPod(cfg, v, "admission-check", 0)
		got, err := cs.CoreV1().Pods(cfg.Namespace).Create(ctx, want, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return fmt.Errorf("admission refuses the %s pods in namespace %s: %w%s", v, cfg.Namespace, err, admissionHint)
		}
		if diff := podRewrite(want, got); diff != "" {
			return fmt.Errorf("admission rewrites the %s pods in namespace %s (%s), so the bench would not measure the pods it sends%s", v, cfg.Namespace, diff, admissionHint)
		}
	}
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: "admission-check", Labels: map[string]string{device.LabelOptOut: "true"}},
		Spec: corev1.PodSpec{
			SchedulerName: "hami-go-bench-none", // nobody schedules it
			NodeSelector:  map[string]string{benchLabel: "true"},
			Containers:    []corev1.Container{{Name: "main", Image: "docker.io/hami-go/workload:0.1.0", Command: []string{"pause"}}},
		},
	}
	if _, err := cs.CoreV1().Pods(cfg.Namespace).Create(ctx, probe, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("admission check: create pod %s/%s: %w", cfg.Namespace, probe.Name, err)
	}
	defer func() {
		_ = cs.CoreV1().Pods(cfg.Namespace).Delete(context.Background(), probe.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{device.AnnoPlanned: "{}"}}})
	if err != nil {
		return err
	}
	if _, err := ext.CoreV1().Pods(cfg.Namespace).Patch(ctx, probe.Name, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		as := "its own credentials"
		if cfg.ExtenderAs != "" {
			as = cfg.ExtenderAs
		}
		return fmt.Errorf("the API server refuses the bench's extender (as %s) the %s annotation it writes on every bind: %w "+
			"(hami-go's chart lets only its scheduler and device plugin write it, allocationPolicy: run with "+
			"--extender-as system:serviceaccount:<release namespace>:<release>-scheduler, e.g. system:serviceaccount:hami-go-system:hami-go-scheduler, "+
			"in device-plugin mode, or on a cluster without the chart: HAMI_GO_SKIP_CHART=1 hack/cluster/up.sh)", as, device.AnnoPlanned, err)
	}
	return nil
}

// admissionHint says how to keep hami-go's webhook away from the bench's pods.
const admissionHint = "; hami-go's webhook must not serve the bench's namespace: list it in the chart's webhook.excludeNamespaces " +
	"(charts/hami-go/values-local.yaml lists hami-go-bench) or use a cluster without the chart (HAMI_GO_SKIP_CHART=1 hack/cluster/up.sh)"

// podRewrite says what admission changed in a bench pod (want sent, got returned), or "": its
// scheduler, node affinity, resource claims and each container's limits and requests (the API
// server's defaulting copies limits into missing requests, which is no change).
func podRewrite(want, got *corev1.Pod) string {
	var diffs []string
	if got.Spec.SchedulerName != want.Spec.SchedulerName {
		diffs = append(diffs, fmt.Sprintf("schedulerName %q, sent %q", got.Spec.SchedulerName, want.Spec.SchedulerName))
	}
	if got.Spec.Affinity != nil && want.Spec.Affinity == nil {
		diffs = append(diffs, "an affinity added")
	}
	if len(got.Spec.ResourceClaims) != len(want.Spec.ResourceClaims) {
		diffs = append(diffs, fmt.Sprintf("%d resourceClaims, sent %d", len(got.Spec.ResourceClaims), len(want.Spec.ResourceClaims)))
	}
	for i := range want.Spec.Containers {
		if i >= len(got.Spec.Containers) {
			break
		}
		w, g := want.Spec.Containers[i].Resources, got.Spec.Containers[i].Resources
		name := want.Spec.Containers[i].Name
		for _, k := range resourceKeys(w.Limits, g.Limits) {
			wq, wok := w.Limits[k]
			gq, gok := g.Limits[k]
			if wok != gok || wq.Cmp(gq) != 0 {
				diffs = append(diffs, fmt.Sprintf("container %s limits[%s] %s, sent %s", name, k, quantity(gq, gok), quantity(wq, wok)))
			}
		}
		for _, k := range resourceKeys(w.Requests, g.Requests) {
			wq, wok := w.Requests[k]
			if !wok {
				wq, wok = w.Limits[k] // defaulted from the limit
			}
			gq, gok := g.Requests[k]
			if wok != gok || wq.Cmp(gq) != 0 {
				diffs = append(diffs, fmt.Sprintf("container %s requests[%s] %s, sent %s", name, k, quantity(gq, gok), quantity(wq, wok)))
			}
		}
	}
	return strings.Join(diffs, "; ")
}

func resourceKeys(a, b corev1.ResourceList) []corev1.ResourceName {
	seen := map[corev1.ResourceName]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	out := make([]corev1.ResourceName, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func quantity(q resource.Quantity, ok bool) string {
	if !ok {
		return "none"
	}
	return q.String()
}
