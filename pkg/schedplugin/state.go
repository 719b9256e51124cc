package schedplugin

import (
	"time"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/hami-go/hami-go/pkg/device"
)

// Keys of the plugin's data in a pod's CycleState.
const (
	filterKey fwk.StateKey = Name + "/filter"
	scoreKey  fwk.StateKey = Name + "/score"
)

// filterState is PreFilter's outcome for a GPU pod of ours: its parsed request and the
// extender's verdict on every node it was given. Written once, read only (Clone shares it).
type filterState struct {
	req *device.PodRequest
	// fits are the nodes that fit; failed (Unschedulable) and unresolvable
	// (UnschedulableAndUnresolvable) map the others to the extender's reason.
	fits         map[string]struct{}
	failed       map[string]string
	unresolvable map[string]string
	// released: a node was refused because its device plugin released its Lease
	// (extender.Scheduler.Weigh).
	released bool
	// weighedAt is when the extender weighed the nodes (its clock).
	weighedAt time.Time
}

// Clone returns s itself: it is never modified after PreFilter.
func (s *filterState) Clone() fwk.StateData { return s }

// scoreState is PreScore's outcome: the extender's score (0..10) of each node that passed every
// Filter. Written once, read only.
type scoreState struct {
	scores map[string]int64
}

// Clone returns s itself: it is never modified after PreScore.
func (s *scoreState) Clone() fwk.StateData { return s }

// readFilter returns the pod's filterState; nil when PreFilter skipped the pod or did not run.
func readFilter(state fwk.CycleState) *filterState {
	d, err := state.Read(filterKey)
	if err != nil {
		return nil
	}
	s, _ := d.(*filterState)
	return s
}
