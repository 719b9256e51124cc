package device

import "fmt"

// GPUMemory looks up the memory, MiB, that the node's inventory gives the GPU with the given
// UUID (the base of a percentage request, ContainerRequest.MemoryOn); ok is false for a GPU the
// node does not have.
type GPUMemory func(uuid string) (totalMiB int64, ok bool)

// GrantOn returns what container c is granted on the GPU uuid of totalMiB: its MemoryOn(totalMiB)
// and its CoresPercent. It is the one rule by which the extender plans a grant, the device
// plugin checks a planned one, and the extender charges a recorded one (case C36).
func (c *ContainerRequest) GrantOn(uuid string, totalMiB int64) DeviceGrant {
	return DeviceGrant{UUID: uuid, MemoryMiB: c.MemoryOn(totalMiB), CoresPercent: c.CoresPercent}
}

// CheckAllocation verifies that allocation a (a planned or claimed record read from a pod) is
// exactly what request r asks on this node (case C36): the same GPU containers, by name and
// kind, in the kubelet's order; per container the requested number of distinct GPUs, each a GPU
// of the node (gpuMiB), each granted GrantOn (memory and cores: never more, never less).
// Containers of a whose Devices are empty are checked too. The error names the field and says
// what the pod asks, so a refusal can be shown on the pod.
func CheckAllocation(a *Allocation, r *PodRequest, gpuMiB GPUMemory) error {
	if len(a.Containers) != len(r.Containers) {
		return fmt.Errorf("allocation.containers: %d entries, but the pod has %d GPU containers", len(a.Containers), len(r.Containers))
	}
	for i := range r.Containers {
		if err := checkContainer(i, &a.Containers[i], &r.Containers[i], gpuMiB); err != nil {
			return err
		}
	}
	return nil
}

// CheckContainer is CheckAllocation for one container a, found in r by its name (claimed
// records may hold only the containers claimed so far).
func CheckContainer(a *ContainerAllocation, r *PodRequest, gpuMiB GPUMemory) error {
	for i := range r.Containers {
		if r.Containers[i].Name == a.Name {
			return checkContainer(i, a, &r.Containers[i], gpuMiB)
		}
	}
	return fmt.Errorf("allocation container %q: the pod has no GPU container of that name", a.Name)
}

func checkContainer(i int, pc *ContainerAllocation, c *ContainerRequest, gpuMiB GPUMemory) error {
	f := fmt.Sprintf("allocation.containers[%d]", i)
	if pc.Name != c.Name {
		return fmt.Errorf("%s.name: %q, but GPU container %d is %q", f, pc.Name, i, c.Name)
	}
	if pc.Kind != c.Kind {
		return fmt.Errorf("%s.kind: %q, but container %q is %q", f, pc.Kind, c.Name, c.Kind)
	}
	if len(pc.Devices) != c.Count {
		return fmt.Errorf("%s.devices: %d GPUs, but container %q asks for %d", f, len(pc.Devices), c.Name, c.Count)
	}
	seen := map[string]bool{}
	for j, d := range pc.Devices {
		df := fmt.Sprintf("%s.devices[%d]", f, j)
		if seen[d.UUID] {
			return fmt.Errorf("%s.uuid: %q is granted twice", df, d.UUID)
		}
		seen[d.UUID] = true
		total, ok := gpuMiB(d.UUID)
		if !ok {
			return fmt.Errorf("%s.uuid: %q is not a GPU of this node", df, d.UUID)
		}
		want := c.GrantOn(d.UUID, total)
		if d.MemoryMiB != want.MemoryMiB {
			return fmt.Errorf("%s.memoryMiB: %d, but container %q asks for %d MiB on this GPU", df, d.MemoryMiB, c.Name, want.MemoryMiB)
		}
		if d.CoresPercent != want.CoresPercent {
			return fmt.Errorf("%s.coresPercent: %d, but container %q asks for %d%%", df, d.CoresPercent, c.Name, want.CoresPercent)
		}
	}
	return nil
}

// FloorAllocation returns a copy of a (a record read from a pod) in which every grant is raised
// to at least what request r asks on that GPU (GrantOn: memory and cores), so that a record
// never charges less than the pod's own request (case C36). gpuMiB may not know a GPU (no
// inventory yet): a percentage request is then raised on the MiB it asks only when it gives
// MiB. It fails when a's containers do not match r's by name, kind and GPU count: such a record
// is not the pod's and must not be charged in place of its request.
func FloorAllocation(a *Allocation, r *PodRequest, gpuMiB GPUMemory) (*Allocation, error) {
	out := &Allocation{Node: a.Node, Containers: make([]ContainerAllocation, len(a.Containers))}
	for i := range a.Containers {
		pc := a.Containers[i]
		var c *ContainerRequest
		for j := range r.Containers {
			if r.Containers[j].Name == pc.Name {
				c = &r.Containers[j]
			}
		}
		f := fmt.Sprintf("allocation.containers[%d]", i)
		switch {
		case c == nil:
			return nil, fmt.Errorf("%s.name: %q is not a GPU container of the pod", f, pc.Name)
		case pc.Kind != c.Kind:
			return nil, fmt.Errorf("%s.kind: %q, but container %q is %q", f, pc.Kind, c.Name, c.Kind)
		case len(pc.Devices) != c.Count:
			return nil, fmt.Errorf("%s.devices: %d GPUs, but container %q asks for %d", f, len(pc.Devices), c.Name, c.Count)
		}
		pc.Devices = append([]DeviceGrant(nil), pc.Devices...)
		pc.SliceIDs = append([]string(nil), pc.SliceIDs...)
		for j := range pc.Devices {
			d := &pc.Devices[j]
			want := ContainerRequest{MemoryMiB: c.MemoryMiB, CoresPercent: c.CoresPercent}
			if total, ok := gpuMiB(d.UUID); ok || c.MemoryMiB > 0 {
				want.MemoryMiB = c.GrantOn(d.UUID, total).MemoryMiB
			}
			d.MemoryMiB = max(d.MemoryMiB, want.MemoryMiB)
			d.CoresPercent = max(d.CoresPercent, want.CoresPercent)
		}
		out.Containers[i] = pc
	}
	return out, nil
}
