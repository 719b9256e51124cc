//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Case C63 on the simulated GPU node, in either mode: the node passes pod annotations
// cdi.k8s.io/* on to NVIDIA's runtime (containerd pod_annotations, as
// devicePlugin.nvidiaDevices=cdi-annotation needs; hack/cluster/gpunode.sh), and the runtime in
// cdi mode injects the devices they name. In the release's namespace, where the node agents name
// the GPUs for themselves, a pod without GPU limits annotated cdi.k8s.io/e2e: nvidia.com/gpu=all
// sees every GPU of the node through CUDA: the channel is real. In a tenant's namespace the
// chart's cdi-annotations policy refuses that pod at the API server, also labelled
// hami-go.io/ignore=true (which the webhook never sees).
func TestSimGPUCDIAnnotationChannel(t *testing.T) {
	requireSimGPU(t)
	c := NewCluster(t)
	const key, all = "cdi.k8s.io/e2e", "nvidia.com/gpu=all"
	var gpus int
	if c.isDRAMode(t) {
		gpus = len(c.draGPUs(t))
	} else {
		gpus = len(c.inventory(t).GPUs)
	}

	own := probePod(chartNamespace, "e2e-cdi-annotation-"+rand.String(5), gpuLimits{})
	own.Annotations = map[string]string{key: all}
	c.CreatePod(t, own)
	t.Cleanup(func() {
		zero := int64(0)
		_ = c.Client.CoreV1().Pods(chartNamespace).Delete(context.Background(), own.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	c.WaitForRunning(t, chartNamespace, own.Name, 2*time.Minute)
	probe, _ := c.probeOf(t, chartNamespace, own.Name)
	t.Logf("release namespace, %s: %s: %d GPUs (error %q)", key, all, len(probe.Devices), probe.Error)
	if len(probe.Devices) != gpus {
		t.Errorf("a pod of the release's namespace annotated %s: %s sees %d GPUs (error %q), want all %d: the node does not pass the annotation on, so this test shows nothing",
			key, all, len(probe.Devices), probe.Error, gpus)
	}

	ns := e2eNamespace(t, c)
	for _, ignore := range []bool{false, true} {
		p := probePod(ns, "annotated", gpuLimits{})
		p.Annotations = map[string]string{key: all}
		if ignore {
			p.Labels["hami-go.io/ignore"] = "true"
		}
		_, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "hami-go-cdi-annotations") || !strings.Contains(err.Error(), "names GPUs") {
			t.Errorf("tenant pod annotated %s: %s (hami-go.io/ignore=%v): create error %v, want the cdi-annotations policy's refusal", key, all, ignore, err)
			continue
		}
		t.Logf("tenant pod (hami-go.io/ignore=%v) refused: %v", ignore, err)
	}
}
