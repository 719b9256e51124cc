package webhook

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/hami-go/hami-go/pkg/draapi"
)

// gpuDev is one published GPU for a test ResourceSlice (the capacities and attributes the
// driver publishes, pkg/dra Devices).
type gpuDev struct {
	name, uuid, product string
	memMiB, sharers     int64
	numa                int64 // -1: none
}

func (g gpuDev) device() resourceapi.Device {
	str := func(s string) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{StringValue: &s} }
	d := resourceapi.Device{
		Name: g.name,
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			draapi.AttrUUID: str(g.uuid), draapi.AttrProductName: str(g.product),
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			draapi.CapacityMemory:  {Value: *resource.NewQuantity(g.memMiB<<20, resource.BinarySI)},
			draapi.CapacityCores:   {Value: *resource.NewQuantity(100, resource.DecimalSI)},
			draapi.CapacitySharers: {Value: *resource.NewQuantity(g.sharers, resource.DecimalSI)},
		},
	}
	if g.numa >= 0 {
		n := g.numa
		d.Attributes["resource.kubernetes.io/numaNode"] = resourceapi.DeviceAttribute{IntValue: &n}
	}
	return d
}

// slice is a ResourceSlice of driver (gpu.hami-go.io unless set) on node with devs.
func slice(node, driver string, devs ...gpuDev) *resourceapi.ResourceSlice {
	if driver == "" {
		driver = draapi.DriverName
	}
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: &node,
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}},
	}
	for _, d := range devs {
		s.Spec.Devices = append(s.Spec.Devices, d.device())
	}
	return s
}

// h100 and a100 are the two kinds of the default test fleet.
var (
	h100 = gpuDev{name: "gpu-0", uuid: "GPU-h100-0", product: "NVIDIA H100 80GB HBM3", memMiB: 81559, sharers: 10, numa: 0}
	a100 = gpuDev{name: "gpu-0", uuid: "GPU-a100-0", product: "NVIDIA A100-SXM4-40GB", memMiB: 40960, sharers: 10, numa: 1}
)

// draEnv is a DRA-mode pod handler on a real DRABackend whose informers read a fake clientset
// (unit tests only; e2e runs the webhook against a real API server).
type draEnv struct {
	h      *PodHandler
	client *fake.Clientset
	be     *DRABackend
}

// newDRAEnv starts the backend on objs (slices, templates) and waits for its caches.
func newDRAEnv(t testing.TB, objs ...runtime.Object) draEnv {
	t.Helper()
	return newDRAEnvWith(t, nil, objs...)
}

// newDRAEnvWith is newDRAEnv with mod applied to the handler's Config.
func newDRAEnvWith(t testing.TB, mod func(*Config), objs ...runtime.Object) draEnv {
	t.Helper()
	client := fake.NewClientset(objs...)
	be := NewDRABackend(client)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := be.Start(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Namespace = "hami-go-system"
	cfg.Mode = ModeDRA
	if mod != nil {
		mod(&cfg)
	}
	return draEnv{h: NewDRAPodHandler(cfg, NewMetrics(nil), be, be), client: client, be: be}
}

// defaultFleet is one H100 node and one A100 node.
func defaultFleet() []runtime.Object {
	a := a100
	a.uuid = "GPU-a100-0"
	return []runtime.Object{slice("node-h", "", h100), slice("node-a", "", a)}
}

// runDry is run with the request marked dry-run.
func runDry(t *testing.T, h admission.Handler, obj any) admission.Response {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	dry := true
	return h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "uid-dry", Operation: admissionv1.Create, Namespace: "team-a", DryRun: &dry, Object: runtime.RawExtension{Raw: raw},
	}})
}

// templates lists the ResourceClaimTemplates in the fake API, by name.
func (e draEnv) templates(t testing.TB, ns string) map[string]resourceapi.ResourceClaimTemplate {
	t.Helper()
	l, err := e.client.ResourceV1().ResourceClaimTemplates(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]resourceapi.ResourceClaimTemplate{}
	for _, x := range l.Items {
		out[x.Name] = x
	}
	return out
}

// claimOf returns the template a container's claim comes from.
func claimOf(t testing.TB, p corev1.Pod, container string) (claim, template string) {
	t.Helper()
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			if c.Name != container {
				continue
			}
			if len(c.Resources.Claims) != 1 {
				t.Fatalf("container %s claims %+v", container, c.Resources.Claims)
			}
			claim = c.Resources.Claims[0].Name
		}
	}
	for _, rc := range p.Spec.ResourceClaims {
		if rc.Name == claim && rc.ResourceClaimTemplateName != nil {
			return claim, *rc.ResourceClaimTemplateName
		}
	}
	t.Fatalf("container %s: claim %q not in spec.resourceClaims %+v", container, claim, p.Spec.ResourceClaims)
	return "", ""
}
