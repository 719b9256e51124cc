package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/hami-go/hami-go/hack/bench/e2eresult"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/dra"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// The DRA variants' objects. The dra-slices devices are published under hami-go's own driver
// name (draapi.DriverName) exactly as its DRA driver publishes them; the dra-plain devices under
// a driver name of their own. Each DRA variant runs with only its own driver's ResourceSlices on
// the nodes: kube-scheduler's allocator checks a node's devices in order against the claim's
// DeviceClass and stops at the first that fits, so with both published the claims of the driver
// that sorts first would skip the other's devices for free while the other driver's claims paid
// for checking them (at 300 nodes dra-slices placed 16 pods/s beside plain slices, 27 alone). The
// DeviceClasses have names of their own (a chart's DeviceClass gpu.hami-go.io, if any, is left
// alone) and the chart's selector (device.driver == <driver>).
const (
	// PlainDriver is the driver name of the dra-plain variant's devices.
	PlainDriver = "bench-plain.hami-go.io"
	// PlainClass and SlicesClass are the DeviceClasses of the dra-plain and dra-slices claims.
	PlainClass  = "hami-go-bench-plain"
	SlicesClass = "hami-go-bench-slices"
	// draRequest is the name of the one request in each claim (and of the pod's claim).
	draRequest = "gpu"
	// sliceDriverLabel holds the driver of a bench ResourceSlice (label value: the driver name).
	sliceDriverLabel = "hami-go.io/bench-driver"
)

// driverOf is the driver whose devices a DRA variant's claims ask for.
func driverOf(variant string) string {
	if variant == e2eresult.VariantDRAPlain {
		return PlainDriver
	}
	return draapi.DriverName
}

// draGPUInfos is what hami-go's DRA driver knows of simulated node i's GPUs (as
// hack/schedperf's hamiDevices: the node's GPUs with a PCI bus id, Hopper facts).
func draGPUInfos(i int) []dra.GPUInfo {
	facts := device.GPUFacts{ComputeCapability: "9.0", Architecture: "Hopper", DriverVersion: "550.54.15", CUDADriverVersion: "12.4"}
	gpus := simGPUs(i)
	infos := make([]dra.GPUInfo, 0, len(gpus))
	for _, g := range gpus {
		g.PCIBusID = fmt.Sprintf("00000000:%02x:00.0", 0x10+g.Index)
		infos = append(infos, dra.GPUInfo{GPU: g, Facts: facts})
	}
	return infos
}

// hamiDevices returns what hami-go's DRA driver publishes for node i: pkg/dra's builder
// (dra.Devices: one device per GPU, allowMultipleAllocations, memory/cores/sharers capacities).
func hamiDevices(i int) []resourceapi.Device {
	return dra.Devices(draGPUInfos(i), dra.SliceConfig{SplitCount: splitCount, MemoryScaling: 1, Enforcement: simEnforcement})
}

// plainDevices returns the dra-plain devices of node i: the same devices and attributes without
// allowMultipleAllocations and capacities, as a driver that hands out whole GPUs publishes them.
func plainDevices(i int) []resourceapi.Device {
	devs := hamiDevices(i)
	for j := range devs {
		devs[j].AllowMultipleAllocations = nil
		devs[j].Capacity = nil
	}
	return devs
}

// nodeSlice returns node n's (simulated node i) ResourceSlice of driver (draapi.DriverName:
// hamiDevices, PlainDriver: plainDevices), the driver's only slice of pool <node name> (as
// dra.Driver.Resources publishes), labelled with benchLabel and sliceDriverLabel and owned by
// the node.
func nodeSlice(n *corev1.Node, i int, driver string) *resourceapi.ResourceSlice {
	devs := hamiDevices(i)
	if driver == PlainDriver {
		devs = plainDevices(i)
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name + "-" + driver, Labels: map[string]string{benchLabel: "true", sliceDriverLabel: driver},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			Pool:     resourceapi.ResourcePool{Name: n.Name, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(n.Name),
			Devices:  devs,
		},
	}
}

// deviceClasses returns the two DeviceClasses (labelled with benchLabel).
func deviceClasses() []*resourceapi.DeviceClass {
	mk := func(name, driver string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{benchLabel: "true"}},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}},
		}
	}
	return []*resourceapi.DeviceClass{mk(PlainClass, PlainDriver), mk(SlicesClass, draapi.DriverName)}
}

// templateName is the ResourceClaimTemplate of a DRA variant's pods.
func templateName(variant string) string { return variant }

// claimTemplates returns the ResourceClaimTemplates of the two DRA variants in cfg.Namespace:
// dra-plain asks one whole device of PlainClass; dra-slices one device of SlicesClass with
// capacity memory cfg.GPUMemMiB MiB (as bytes) and cores cfg.DRACores (sharers: the policy's
// default, 1).
func claimTemplates(cfg Config) []*resourceapi.ResourceClaimTemplate {
	mk := func(variant string, req resourceapi.ExactDeviceRequest) *resourceapi.ResourceClaimTemplate {
		req.AllocationMode, req.Count = resourceapi.DeviceAllocationModeExactCount, 1
		return &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: templateName(variant)},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{Name: draRequest, Exactly: &req}}}}},
		}
	}
	slices := resourceapi.ExactDeviceRequest{DeviceClassName: SlicesClass, Capacity: &resourceapi.CapacityRequirements{
		Requests: map[resourceapi.QualifiedName]resource.Quantity{
			draapi.CapacityMemory: *resource.NewQuantity(cfg.GPUMemMiB*dra.MiB, resource.BinarySI),
			draapi.CapacityCores:  *resource.NewQuantity(cfg.DRACores, resource.DecimalSI),
		}}}
	return []*resourceapi.ResourceClaimTemplate{
		mk(e2eresult.VariantDRAPlain, resourceapi.ExactDeviceRequest{DeviceClassName: PlainClass}),
		mk(e2eresult.VariantDRASlices, slices),
	}
}

// withClaim makes p (a pod of a DRA variant) ask one ResourceClaim from the variant's template,
// used by its container, instead of extended resources.
func withClaim(p *corev1.Pod, variant string) {
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: draRequest, ResourceClaimTemplateName: ptr.To(templateName(variant))}}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: draRequest}}}
}

// setupDRA creates the DeviceClasses and the claim templates, and returns the publisher of
// the simulated nodes' ResourceSlices (none published yet).
func setupDRA(ctx context.Context, cs kubernetes.Interface, cfg Config) (*slicePublisher, error) {
	for _, c := range deviceClasses() {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, c, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create DeviceClass %s: %w", c.Name, err)
		}
	}
	for _, tmpl := range claimTemplates(cfg) {
		if _, err := cs.ResourceV1().ResourceClaimTemplates(cfg.Namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create ResourceClaimTemplate %s: %w", tmpl.Name, err)
		}
	}
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: benchLabel + "=true"})
	if err != nil {
		return nil, err
	}
	p := &slicePublisher{cs: cs, nodes: make([]*corev1.Node, cfg.Nodes)}
	byName := map[string]*corev1.Node{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	for i := range p.nodes {
		if p.nodes[i] = byName[nodeName(i)]; p.nodes[i] == nil {
			return nil, fmt.Errorf("simulated node %s not found", nodeName(i))
		}
	}
	klog.InfoS("DRA objects created", "deviceClasses", 2, "claimTemplates", 2)
	return p, nil
}

// slicePublisher keeps one DRA driver's ResourceSlices, one per simulated node, published.
type slicePublisher struct {
	cs    kubernetes.Interface
	nodes []*corev1.Node // simulated node i
	// driver is the driver whose slices are published ("": none).
	driver string
}

// use publishes driver's ResourceSlice on every simulated node, after deleting the other
// driver's (and waiting until they are gone); nothing when driver's are published already.
func (p *slicePublisher) use(ctx context.Context, driver string) error {
	if p.driver == driver {
		return nil
	}
	t := time.Now()
	if p.driver != "" {
		if err := deleteSlices(ctx, p.cs, benchLabel+"=true,"+sliceDriverLabel+"="+p.driver); err != nil {
			return err
		}
		p.driver = ""
	}
	err := parallel(ctx, len(p.nodes), 32, func(ctx context.Context, i int) error {
		s := nodeSlice(p.nodes[i], i, driver)
		if _, err := p.cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceSlice %s: %w", s.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.driver = driver
	klog.InfoS("ResourceSlices published", "driver", driver, "slices", len(p.nodes), "took", time.Since(t).Round(time.Millisecond))
	return nil
}

// deleteSlices deletes the ResourceSlices that sel selects and waits until none is left.
func deleteSlices(ctx context.Context, cs kubernetes.Interface, sel string) error {
	opts := metav1.ListOptions{LabelSelector: sel}
	for {
		if err := cs.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{}, opts); err != nil {
			return fmt.Errorf("delete ResourceSlices %s: %w", sel, err)
		}
		l, err := cs.ResourceV1().ResourceSlices().List(ctx, opts)
		if err != nil {
			return fmt.Errorf("list ResourceSlices %s: %w", sel, err)
		}
		if len(l.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d ResourceSlices %s still there: %w", len(l.Items), sel, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitClaimsGone waits until ns has no ResourceClaim left: kube-controller-manager deletes the
// claims it made from templates once their pods are gone, and a claim left over would keep its
// device capacity allocated in the next run. After 30 s it deletes the rest itself.
func waitClaimsGone(ctx context.Context, cs kubernetes.Interface, ns string) error {
	t := time.Now()
	deleted := false
	for {
		l, err := cs.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list ResourceClaims of %s: %w", ns, err)
		}
		if len(l.Items) == 0 {
			if time.Since(t) > time.Second {
				klog.V(1).InfoS("ResourceClaims gone", "namespace", ns, "took", time.Since(t).Round(time.Millisecond))
			}
			return nil
		}
		if !deleted && time.Since(t) > 30*time.Second {
			klog.InfoS("ResourceClaims still there after 30s; deleting them", "namespace", ns, "claims", len(l.Items))
			deleted = true
			if err := parallel(ctx, len(l.Items), 16, func(ctx context.Context, i int) error {
				err := cs.ResourceV1().ResourceClaims(ns).Delete(ctx, l.Items[i].Name, metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			}); err != nil {
				return fmt.Errorf("delete ResourceClaims of %s: %w", ns, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d ResourceClaims of %s still there: %w", len(l.Items), ns, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// deleteDRA deletes the ResourceSlices and DeviceClasses labelled with benchLabel (the
// namespace's deletion takes the templates and claims).
func deleteDRA(ctx context.Context, cs kubernetes.Interface) []error {
	var errs []error
	sel := metav1.ListOptions{LabelSelector: benchLabel + "=true"}
	if err := deleteSlices(ctx, cs, sel.LabelSelector); err != nil {
		errs = append(errs, err)
	}
	if err := cs.ResourceV1().DeviceClasses().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		errs = append(errs, fmt.Errorf("delete DeviceClasses: %w", err))
	}
	return errs
}
