package gpuview

import (
	"fmt"
	"regexp"
	"sort"

	"github.com/hami-go/hami-go/pkg/draapi"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// DRA reasons (docs/design.md "DRA mode"): in DRA mode kube-scheduler's DynamicResources plugin
// only says a node "cannot allocate all claims". ExplainDRA recomputes, per node and device,
// why each request of the pod's gpu.hami-go.io claims does not fit, from the ResourceSlices and
// the allocated claims' consumed capacity (resource.k8s.io/v1, KEP-5075 consumable capacity).

// DRAClaim is one of the pod's spec.resourceClaims of DeviceClass gpu.hami-go.io.
type DRAClaim struct {
	// PodClaimName is the entry's name in pod.spec.resourceClaims.
	PodClaimName string `json:"podClaimName"`
	// Claim is the ResourceClaim's name (for a template, the one kube-controller-manager made,
	// from pod.status.resourceClaimStatuses); Template the ResourceClaimTemplate, if any.
	Claim    string `json:"claim"`
	Template string `json:"template,omitempty"`
	// Requests are the claim's requests of DeviceClass gpu.hami-go.io.
	Requests []DRARequest `json:"requests"`
	// Allocated are the devices the claim got (empty while it is not allocated).
	Allocated []DRAAllocatedDevice `json:"allocated,omitempty"`
}

// DRARequest is one device request. A nil capacity ask means "not set": the device's
// requestPolicy default, else its whole capacity, is consumed (KEP-5075).
type DRARequest struct {
	Name string `json:"name"`
	// Count is the number of devices (allocationMode ExactCount); All is true for allocationMode
	// All; Count 0 without All is a firstAvailable request (not evaluated).
	Count int64 `json:"count"`
	All   bool  `json:"all,omitempty"`
	// MemoryMiB (capacity "memory", bytes rounded up to MiB), CoresPercent ("cores") and
	// Sharers ("sharers") are the capacity asks per device.
	MemoryMiB    *int64 `json:"memoryMiB,omitempty"`
	CoresPercent *int64 `json:"coresPercent,omitempty"`
	Sharers      *int64 `json:"sharers,omitempty"`
	// Selectors are the CEL expressions; NotEvaluated those this view cannot evaluate (only
	// `device.attributes["domain"].name == "value"` and `device.driver == "value"` are).
	Selectors    []string `json:"selectors,omitempty"`
	NotEvaluated []string `json:"selectorsNotEvaluated,omitempty"`
}

// DRAAllocatedDevice is one allocation result of a claim (memory in MiB, cores in percent).
type DRAAllocatedDevice struct {
	Request      string `json:"request"`
	Pool         string `json:"pool"`
	Device       string `json:"device"`
	MemoryMiB    int64  `json:"memoryMiB"`
	CoresPercent int64  `json:"coresPercent"`
}

// draDev is one published device of the class with what allocated claims consume of it.
type draDev struct {
	pool   string
	d      *resourcev1.Device
	used   map[resourcev1.QualifiedName]int64 // consumed capacity; "sharers": allocations
	owners []string                           // ns/claim of the allocations
}

// draUses reports whether pod uses DRA claims of class gpu.hami-go.io, resolving them from objs.
// problems are claims that cannot be read (not created yet, not found).
func draUses(pod *corev1.Pod, objs Objects) (claims []DRAClaim, raw []*resourcev1.ResourceClaim, problems []string) {
	byName := map[string]*resourcev1.ResourceClaim{}
	for i := range objs.ResourceClaims {
		c := &objs.ResourceClaims[i]
		if c.Namespace == pod.Namespace {
			byName[c.Name] = c
		}
	}
	for _, pc := range pod.Spec.ResourceClaims {
		dc := DRAClaim{PodClaimName: pc.Name}
		switch {
		case pc.ResourceClaimName != nil:
			dc.Claim = *pc.ResourceClaimName
		case pc.ResourceClaimTemplateName != nil:
			dc.Template = *pc.ResourceClaimTemplateName
			listed := false
			for _, s := range pod.Status.ResourceClaimStatuses {
				if s.Name == pc.Name {
					listed = true
					if s.ResourceClaimName != nil {
						dc.Claim = *s.ResourceClaimName
					}
				}
			}
			if listed && dc.Claim == "" {
				continue // the status says no claim is needed (core/v1 PodResourceClaimStatus)
			}
			if dc.Claim == "" {
				problems = append(problems, fmt.Sprintf("spec.resourceClaims[%s]: no ResourceClaim made from template %s yet (pod.status.resourceClaimStatuses; kube-controller-manager creates it)", pc.Name, dc.Template))
				continue
			}
		default:
			continue
		}
		c := byName[dc.Claim]
		if c == nil {
			problems = append(problems, fmt.Sprintf("spec.resourceClaims[%s]: ResourceClaim %s/%s not found", pc.Name, pod.Namespace, dc.Claim))
			continue
		}
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil && r.Exactly.DeviceClassName == draapi.DriverName {
				dc.Requests = append(dc.Requests, draRequest(r.Name, r.Exactly))
			}
			for _, sub := range r.FirstAvailable {
				if sub.DeviceClassName == draapi.DriverName {
					// Not evaluated: fitNode treats it as fitting (docs/components.md).
					dc.Requests = append(dc.Requests, DRARequest{Name: r.Name, NotEvaluated: []string{"firstAvailable (subrequests are not evaluated)"}})
					break
				}
			}
		}
		if len(dc.Requests) == 0 {
			continue
		}
		if a := c.Status.Allocation; a != nil {
			for _, res := range a.Devices.Results {
				if res.Driver != draapi.DriverName {
					continue
				}
				ad := DRAAllocatedDevice{Request: res.Request, Pool: res.Pool, Device: res.Device, MemoryMiB: -1, CoresPercent: -1}
				if q, ok := res.ConsumedCapacity[draapi.CapacityMemory]; ok {
					ad.MemoryMiB = mibOf(q)
				}
				if q, ok := res.ConsumedCapacity[draapi.CapacityCores]; ok {
					ad.CoresPercent = q.Value()
				}
				dc.Allocated = append(dc.Allocated, ad)
			}
		}
		claims, raw = append(claims, dc), append(raw, c)
	}
	return claims, raw, problems
}

func draRequest(name string, x *resourcev1.ExactDeviceRequest) DRARequest {
	r := DRARequest{Name: name, Count: x.Count, All: x.AllocationMode == resourcev1.DeviceAllocationModeAll}
	if r.Count == 0 && !r.All {
		r.Count = 1
	}
	if x.Capacity != nil {
		if q, ok := x.Capacity.Requests[draapi.CapacityMemory]; ok {
			v := mibOf(q)
			r.MemoryMiB = &v
		}
		if q, ok := x.Capacity.Requests[draapi.CapacityCores]; ok {
			v := q.Value()
			r.CoresPercent = &v
		}
		if q, ok := x.Capacity.Requests[draapi.CapacitySharers]; ok {
			v := q.Value()
			r.Sharers = &v
		}
	}
	for _, s := range x.Selectors {
		if s.CEL == nil {
			continue
		}
		r.Selectors = append(r.Selectors, s.CEL.Expression)
		if _, ok := parseSelector(s.CEL.Expression); !ok {
			r.NotEvaluated = append(r.NotEvaluated, s.CEL.Expression)
		}
	}
	return r
}

// selector is an equality the view evaluates: attribute (qualified) == value, or driver == value.
type selector struct {
	attr   resourcev1.QualifiedName // "" for device.driver
	domain string
	value  string
}

var (
	selAttr   = regexp.MustCompile(`^\s*device\.attributes\["([^"]+)"\]\.([A-Za-z_][A-Za-z0-9_]*)\s*==\s*"([^"]*)"\s*$`)
	selDriver = regexp.MustCompile(`^\s*device\.driver\s*==\s*"([^"]*)"\s*$`)
)

func parseSelector(expr string) (selector, bool) {
	if m := selAttr.FindStringSubmatch(expr); m != nil {
		return selector{domain: m[1], attr: resourcev1.QualifiedName(m[2]), value: m[3]}, true
	}
	if m := selDriver.FindStringSubmatch(expr); m != nil {
		return selector{value: m[1]}, true
	}
	return selector{}, false
}

// matches reports whether d (of driver gpu.hami-go.io) satisfies s; an attribute the device
// lacks does not match (CEL would fail the evaluation, which refuses the device too).
func (s selector) matches(d *resourcev1.Device) bool {
	if s.attr == "" {
		return s.value == draapi.DriverName
	}
	a, ok := d.Attributes[resourcev1.QualifiedName(s.domain+"/"+string(s.attr))]
	if !ok && s.domain == draapi.DriverName {
		a, ok = d.Attributes[s.attr]
	}
	if !ok {
		return false
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue == s.value
	case a.VersionValue != nil:
		return *a.VersionValue == s.value
	}
	return false
}

// draInventory collects the class's devices per node, in slice order, and charges every
// allocated claim's results to them: their consumedCapacity (resource.k8s.io/v1 fills every
// entry for a shareable device); where an entry is missing, sharers 1 and memory the whole
// device (as the nodes view, dra.go), cores 0.
func draInventory(objs Objects) (order []string, devs map[string][]*draDev) {
	devs = map[string][]*draDev{}
	byKey := map[string]*draDev{}
	for i := range objs.ResourceSlices {
		s := &objs.ResourceSlices[i]
		if s.Spec.Driver != draapi.DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName == "" {
			continue
		}
		n := *s.Spec.NodeName
		if _, ok := devs[n]; !ok {
			order = append(order, n)
		}
		for di := range s.Spec.Devices {
			d := &draDev{pool: s.Spec.Pool.Name, d: &s.Spec.Devices[di], used: map[resourcev1.QualifiedName]int64{}}
			devs[n] = append(devs[n], d)
			byKey[d.pool+"/"+d.d.Name] = d
		}
	}
	sort.Strings(order)
	for i := range objs.ResourceClaims {
		c := &objs.ResourceClaims[i]
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			d := byKey[r.Pool+"/"+r.Device]
			if r.Driver != draapi.DriverName || d == nil {
				continue
			}
			d.owners = append(d.owners, c.Namespace+"/"+c.Name)
			for k, v := range consumed(d.d, &r) {
				d.used[k] += v
			}
		}
	}
	return order, devs
}
