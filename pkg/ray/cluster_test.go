package ray

import (
	"encoding/json"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/hami-go/hami-go/pkg/device"
)

// quickStart is KubeRay's quick-start RayCluster layout (ray-cluster.sample.yaml): a head
// without GPU and a worker group of 2 with nvidia.com/gpu: 1, plus the groups the tests add.
const quickStart = `
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: raycluster-kuberay
spec:
  rayVersion: "2.52.0"
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.52.0
          resources:
            limits: {cpu: "1", memory: 2G}
            requests: {cpu: "1", memory: 2G}
  workerGroupSpecs:
  - groupName: gpu-group
    replicas: 2
    minReplicas: 0
    maxReplicas: 4
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.52.0
          resources:
            limits: {cpu: "2", memory: 4G, nvidia.com/gpu: "1"}
`

func decode(t *testing.T, y string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func group(obj map[string]any, i int) map[string]any {
	spec := obj["spec"].(map[string]any)
	if i < 0 {
		return spec["headGroupSpec"].(map[string]any)
	}
	return spec["workerGroupSpecs"].([]any)[i].(map[string]any)
}

func managed(obj map[string]any) string {
	a, _ := obj["metadata"].(map[string]any)["annotations"].(map[string]any)
	s, _ := a[AnnoManaged].(string)
	return s
}

func asJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestMutateClusterQuickStart(t *testing.T) {
	c := DefaultConfig("nvidia.com/gpu")
	obj := decode(t, quickStart)
	res, err := c.MutateCluster(obj, device.DefaultResourceNames())
	if err != nil || len(res.Warnings) > 0 {
		t.Fatalf("MutateCluster: %v %q", err, res.Warnings)
	}
	// case C33: the head asks for no GPU and gets num-gpus 0.
	if got := asJSON(group(obj, -1)["rayStartParams"]); got != `{"num-gpus":"0"}` {
		t.Errorf("head rayStartParams = %s", got)
	}
	if got := asJSON(group(obj, 0)["rayStartParams"]); got != `{"num-gpus":"1"}` {
		t.Errorf("worker rayStartParams = %s", got)
	}
	if got := managed(obj); got != `{"head":["rayStartParams.num-gpus"],"worker/gpu-group":["rayStartParams.num-gpus"]}` {
		t.Errorf("managed = %s", got)
	}
}

func TestMutateClusterGroups(t *testing.T) {
	c := DefaultConfig("nvidia.com/gpu")
	y := quickStart + `
  - groupName: slices
    rayStartParams:
      resources: '"{\"custom\": 1}"'
    template:
      spec:
        containers:
        - name: ray-worker
          resources:
            limits: {nvidia.com/gpu: "2", nvidia.com/gpumem: 8000}
  - groupName: memory-only
    template:
      spec:
        containers:
        - name: ray-worker
          resources:
            limits: {nvidia.com/gpumem: 16Gi, nvidia.com/gpucores: "30"}
  - groupName: user-set
    rayStartParams: {num-gpus: "1"}
    template:
      spec:
        containers:
        - name: ray-worker
          resources:
            limits: {nvidia.com/gpu: "2", nvidia.com/gpumem: 4000}
  - groupName: top-level
    resources: {cpu: "2"}
    labels: {zone: a}
    template:
      spec:
        containers:
        - name: ray-worker
          resources:
            limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: 8000}
  - groupName: percentage
    template:
      spec:
        containers:
        - name: ray-worker
          resources:
            limits: {nvidia.com/gpu: "1", nvidia.com/gpumem-percentage: "50"}
  - groupName: mig
    template:
      spec:
        containers:
        - name: ray-worker
          resources:
            limits: {nvidia.com/mig-1g.10gb: "1"}
`
	obj := decode(t, y)
	res, err := c.MutateCluster(obj, device.DefaultResourceNames())
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		1: `{"num-gpus":"2","resources":"'{\"custom\":1,\"gpu_memory_mib\":16000}'"}`, // 2 × 8000 MiB
		2: `{"num-gpus":"1","resources":"'{\"gpu_memory_mib\":16384}'"}`,              // count defaulted to 1; 16Gi = 16384 MiB
		3: `{"num-gpus":"1","resources":"'{\"gpu_memory_mib\":8000}'"}`,               // C31: user's 1 kept (warned: differs from 2)
		5: `{"num-gpus":"1"}`,                                                         // percentage: MiB unknown here
		6: `{"num-gpus":"1"}`,                                                         // C32c MIG
	}
	for i, w := range want {
		if got := asJSON(group(obj, i)["rayStartParams"]); got != w {
			t.Errorf("group %d rayStartParams = %s, want %s", i, got, w)
		}
	}
	top := group(obj, 4)
	if _, has := top["rayStartParams"]; has {
		t.Errorf("top-level group got rayStartParams %s (KubeRay v1.5 rejects both)", asJSON(top["rayStartParams"]))
	}
	if got := asJSON(top["resources"]); got != `{"GPU":"1","cpu":"2","gpu_memory_mib":"8000"}` {
		t.Errorf("top-level resources = %s", got)
	}
	if got := asJSON(top["labels"]); got != `{"zone":"a"}` {
		t.Errorf("labels changed: %s", got)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "spec.workerGroupSpecs[user-set].rayStartParams[num-gpus]: 1 differs from the Ray container's 2 GPU(s)") {
		t.Errorf("warnings %q", res.Warnings)
	}
	wantManaged := `{"head":["rayStartParams.num-gpus"],"worker/gpu-group":["rayStartParams.num-gpus"],"worker/memory-only":["rayStartParams.num-gpus","rayStartParams.resources[gpu_memory_mib]"],"worker/mig":["rayStartParams.num-gpus"],"worker/percentage":["rayStartParams.num-gpus"],"worker/slices":["rayStartParams.num-gpus","rayStartParams.resources[gpu_memory_mib]"],"worker/top-level":["resources[GPU]","resources[gpu_memory_mib]"],"worker/user-set":["rayStartParams.resources[gpu_memory_mib]"]}`
	if got := managed(obj); got != wantManaged {
		t.Errorf("managed =\n%s\nwant\n%s", got, wantManaged)
	}
}

// An update that changes the template recomputes what the webhook wrote; it is not taken for
// a user's value (case C31 on update).
func TestMutateClusterUpdateRecomputes(t *testing.T) {
	c := DefaultConfig("nvidia.com/gpu")
	names := device.DefaultResourceNames()
	obj := decode(t, quickStart)
	if _, err := c.MutateCluster(obj, names); err != nil {
		t.Fatal(err)
	}
	// The user scales the worker to 2 GPUs of 6000 MiB and sends the object back with the
	// webhook's earlier values and annotation in it.
	w := group(obj, 0)
	ctr := w["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	ctr["resources"] = map[string]any{"limits": map[string]any{"nvidia.com/gpu": "2", "nvidia.com/gpumem": "6000"}}
	if _, err := c.MutateCluster(obj, names); err != nil {
		t.Fatal(err)
	}
	if got := asJSON(w["rayStartParams"]); got != `{"num-gpus":"2","resources":"'{\"gpu_memory_mib\":12000}'"}` {
		t.Errorf("after update rayStartParams = %s", got)
	}
	// The GPU request goes away entirely: the webhook's memory key goes with it.
	ctr["resources"] = map[string]any{}
	if _, err := c.MutateCluster(obj, names); err != nil {
		t.Fatal(err)
	}
	if got := asJSON(w["rayStartParams"]); got != `{"num-gpus":"0"}` {
		t.Errorf("after removal rayStartParams = %s", got)
	}
	// A user value set later is kept, and no longer listed as the webhook's.
	w["rayStartParams"] = map[string]any{"num-gpus": "3"}
	obj["metadata"].(map[string]any)["annotations"] = map[string]any{AnnoManaged: `{"head":["rayStartParams.num-gpus"]}`}
	if _, err := c.MutateCluster(obj, names); err != nil {
		t.Fatal(err)
	}
	if got := asJSON(w["rayStartParams"]); got != `{"num-gpus":"3"}` {
		t.Errorf("user value: rayStartParams = %s", got)
	}
	if got := managed(obj); got != `{"head":["rayStartParams.num-gpus"]}` {
		t.Errorf("managed = %s", got)
	}
}

func TestMutateClusterInvalidTemplate(t *testing.T) {
	c := DefaultConfig("nvidia.com/gpu")
	obj := decode(t, strings.Replace(quickStart, `nvidia.com/gpu: "1"`, `nvidia.com/gpu: "1", nvidia.com/gpumem: 3000M`, 1))
	_, err := c.MutateCluster(obj, device.DefaultResourceNames())
	if err == nil || !strings.Contains(err.Error(), "spec.workerGroupSpecs[gpu-group].template.spec.containers[ray-worker].resources.limits[nvidia.com/gpumem]: 3G") || !strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("err = %v", err)
	}
}
