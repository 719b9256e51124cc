package schedplugin

import (
	"maps"
	"slices"
	"time"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
)

// Keys of the plugin's data in a pod's CycleState.
const (
	filterKey fwk.StateKey = Name + "/filter"
	scoreKey  fwk.StateKey = Name + "/score"
)

// filterState is PreFilter's outcome for a GPU pod of ours: its parsed request and priority, the
// extender's verdict on every node it was given, and the changes the framework made since to
// nodes' pods in this copy of the CycleState (PreFilterExtensions: preemption's dry run,
// nominated pods). All but changes is written once and shared by the copies Clone makes.
type filterState struct {
	req  *device.PodRequest
	prio int32
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
	// changes maps a node name to the pods AddPod and RemovePod changed on it; nil: none.
	changes map[string]*extender.NodeChange
}

// Clone returns a copy of s whose changes are its own (the framework clones the CycleState for
// each node of a preemption dry run and for each node with nominated pods).
func (s *filterState) Clone() fwk.StateData {
	c := *s
	if s.changes != nil {
		c.changes = make(map[string]*extender.NodeChange, len(s.changes))
		for n, ch := range s.changes {
			c.changes[n] = &extender.NodeChange{Removed: maps.Clone(ch.Removed), Added: slices.Clone(ch.Added)}
		}
	}
	return &c
}

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
