package deviceplugin

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
)

// checkIDs validates kubelet device IDs: well-formed, a known GPU, a slice number below the
// split count, no duplicates.
func (p *Plugin) checkIDs(ids []string) error {
	if len(ids) == 0 {
		return fmt.Errorf("no device IDs")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		u, n, err := device.ParseSliceID(id)
		if err != nil {
			return err
		}
		if _, ok := p.byUUID[u]; !ok && u != heldPlaceholder {
			// A placeholder (floorDevices) names no GPU, as no device ID decides a pod's GPUs:
			// the kubelet may hand it to a new pod like any free device.
			return fmt.Errorf("device id %q names GPU %q, which is not on node %s", id, u, p.cfg.NodeName)
		}
		if n >= p.cfg.SplitCount {
			return fmt.Errorf("device id %q: slice %d is not below the split count %d", id, n, p.cfg.SplitCount)
		}
		if seen[id] {
			return fmt.Errorf("device id %q appears twice", id)
		}
		seen[id] = true
	}
	return nil
}

// Allocate implements the kubelet API. The call names no pod, so every container request is
// answered with the pending answer (responder.pending: no GPU, no limit), and the node agent's
// NRI plugin applies the pod's own plan when the runtime creates the container, where it names
// the pod (nriSource; docs/design.md "Applying a pod's plan"). Allocate never waits for the NRI
// plugin and never refuses for its sake (a refused Allocate fails the whole pod with
// UnexpectedAdmissionError, which its controller recreates in a loop): PreStartContainer gates
// each container's creation instead. The device IDs are checked (checkIDs) but name no GPU of
// the pod's (cases C18, C19, C22).
func (p *Plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for i, c := range r.ContainerRequests {
		if err := p.checkIDs(c.DevicesIds); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "hami-go: container request %d: %v", i, err)
		}
		klog.V(2).InfoS("Allocate (plan applied at container creation)", "deviceIDs", c.DevicesIds)
		out.ContainerResponses = append(out.ContainerResponses, p.resp.pending())
	}
	return out, nil
}
