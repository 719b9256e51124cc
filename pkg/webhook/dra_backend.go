package webhook

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/draapi"
)

// TemplateStore makes sure a ResourceClaimTemplate the webhook needs exists.
type TemplateStore interface {
	// Ensure returns nil when t exists in t.Namespace with t's spec (found, or created now;
	// AlreadyExists is success when the existing spec is t's). A template of that name with
	// another spec (written by someone else) is an error naming it: the webhook never uses a
	// template whose content it did not write.
	Ensure(ctx context.Context, t *resourceapi.ResourceClaimTemplate) error
}

// DRABackend is the API side of DRA mode: a TemplateStore and a Fleet, both read through
// client-go informers (the webhook's own templates, selected by LabelClaimTemplate, and every
// ResourceSlice), so an admission whose templates exist makes no API call.
type DRABackend struct {
	client    kubernetes.Interface
	factories []informers.SharedInformerFactory
	templates resourcelisters.ResourceClaimTemplateLister
	slices    resourcelisters.ResourceSliceLister
	synced    []cache.InformerSynced

	version atomic.Uint64 // bumped by every ResourceSlice event
	mu      sync.Mutex
	shapes  []DeviceShape
	shapesV uint64 // version shapes were computed at (0: never)
}

// NewDRABackend sets up the informers on client; nothing runs until Start.
func NewDRABackend(client kubernetes.Interface) *DRABackend {
	b := &DRABackend{client: client}
	tf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = LabelClaimTemplate + "=" + LabelClaimTemplateValue
	}))
	sf := informers.NewSharedInformerFactory(client, 0)
	ti := tf.Resource().V1().ResourceClaimTemplates()
	si := sf.Resource().V1().ResourceSlices()
	b.templates, b.slices = ti.Lister(), si.Lister()
	bump := func(any) { b.version.Add(1) }
	_, _ = si.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: bump, DeleteFunc: bump, UpdateFunc: func(_, n any) { bump(n) },
	})
	b.synced = []cache.InformerSynced{ti.Informer().HasSynced, si.Informer().HasSynced}
	b.factories = []informers.SharedInformerFactory{tf, sf}
	b.version.Store(1)
	return b
}

// Start runs the informers until ctx ends and waits up to timeout for their first list; the
// error says which did not sync.
func (b *DRABackend) Start(ctx context.Context, timeout time.Duration) error {
	for _, f := range b.factories {
		f.Start(ctx.Done())
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), b.synced...) {
		return fmt.Errorf("DRA mode: the ResourceClaimTemplate and ResourceSlice caches did not sync within %s (RBAC: list/watch resourceclaimtemplates and resourceslices)", timeout)
	}
	return nil
}

// Synced reports whether both caches have their first list (the readiness check).
func (b *DRABackend) Synced() bool {
	for _, s := range b.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Shapes implements Fleet from the cached ResourceSlices of driver gpu.hami-go.io: the
// distinct (memory capacity in MiB, sharers capacity) of their devices. The set is recomputed
// only after a ResourceSlice event.
func (b *DRABackend) Shapes() []DeviceShape {
	v := b.version.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shapesV == v {
		return b.shapes
	}
	slices, err := b.slices.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Listing cached ResourceSlices")
		return b.shapes
	}
	b.shapes, b.shapesV = ShapesOf(slices), v
	return b.shapes
}

// ShapesOf returns the distinct device shapes of driver gpu.hami-go.io in slices, sorted by
// memory, then sharers. A device without a memory capacity is left out; one without sharers
// counts as split count 1.
func ShapesOf(slices []*resourceapi.ResourceSlice) []DeviceShape {
	seen := map[DeviceShape]bool{}
	var out []DeviceShape
	for _, s := range slices {
		if s.Spec.Driver != draapi.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			mem, ok := d.Capacity[draapi.CapacityMemory]
			if !ok {
				continue
			}
			sh := DeviceShape{MemoryMiB: mem.Value.Value() >> 20, Sharers: 1}
			if c, ok := d.Capacity[draapi.CapacitySharers]; ok {
				sh.Sharers = c.Value.Value()
			}
			if !seen[sh] {
				seen[sh] = true
				out = append(out, sh)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MemoryMiB != out[j].MemoryMiB {
			return out[i].MemoryMiB < out[j].MemoryMiB
		}
		return out[i].Sharers < out[j].Sharers
	})
	return out
}

// Ensure implements TemplateStore: the cached template when it is there, else a Create
// (AlreadyExists: the live object is read and compared).
func (b *DRABackend) Ensure(ctx context.Context, t *resourceapi.ResourceClaimTemplate) error {
	if got, err := b.templates.ResourceClaimTemplates(t.Namespace).Get(t.Name); err == nil {
		return sameTemplate(got, t)
	}
	api := b.client.ResourceV1().ResourceClaimTemplates(t.Namespace)
	_, err := api.Create(ctx, t, metav1.CreateOptions{})
	if err == nil {
		klog.V(2).InfoS("Created ResourceClaimTemplate", "template", klog.KObj(t))
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", t.Namespace, t.Name, err)
	}
	got, err := api.Get(ctx, t.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading ResourceClaimTemplate %s/%s: %w", t.Namespace, t.Name, err)
	}
	return sameTemplate(got, t)
}

// sameTemplate refuses an existing template whose spec is not want's (equality.Semantic:
// quantities compare by value).
func sameTemplate(got, want *resourceapi.ResourceClaimTemplate) error {
	if equality.Semantic.DeepEqual(got.Spec.Spec, want.Spec.Spec) {
		return nil
	}
	return fmt.Errorf("ResourceClaimTemplate %s/%s exists with a spec hami-go did not write; the webhook uses only its own templates (names %s<hash of the spec>): delete or rename that template", got.Namespace, got.Name, TemplatePrefix)
}
