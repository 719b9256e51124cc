package fake

import (
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// maxQueued is the most undelivered events one event set keeps; older ones are dropped.
const maxQueued = 1024

// eventSet is a simulated NVML event set (nvmlEventSet_t): devices registered on it receive
// the XIDs injected with Fleet.InjectXID, delivered by Wait in injection order.
type eventSet struct {
	fleet *Fleet
	// wake has room for one token; a send means "the queue may have grown".
	wake chan struct{}

	// guarded by fleet.mu
	registered map[int]bool
	queue      []gonvml.EventData
	freed      bool
}

var _ gonvml.EventSet = (*eventSet)(nil)

// newEventSet is the library's nvmlEventSetCreate.
func (f *Fleet) newEventSet() (gonvml.EventSet, gonvml.Return) {
	s := &eventSet{fleet: f, wake: make(chan struct{}, 1), registered: make(map[int]bool)}
	f.mu.Lock()
	f.sets[s] = struct{}{}
	f.mu.Unlock()
	return s, gonvml.SUCCESS
}

// register is GPU i's nvmlDeviceRegisterEvents: only EventTypeXidCriticalError is supported.
func (f *Fleet) register(i int, types uint64, set gonvml.EventSet) gonvml.Return {
	s, ok := set.(*eventSet)
	if !ok || s.fleet != f {
		return gonvml.ERROR_INVALID_ARGUMENT
	}
	if types&^uint64(gonvml.EventTypeXidCriticalError) != 0 {
		return gonvml.ERROR_NOT_SUPPORTED
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.freed {
		return gonvml.ERROR_INVALID_ARGUMENT
	}
	if types != 0 {
		s.registered[i] = true
	}
	return gonvml.SUCCESS
}

// deliverLocked queues an XID of GPU i on every live set it is registered on. f.mu is held.
func (f *Fleet) deliverLocked(i int, xid uint64) int {
	delivered := 0
	for s := range f.sets {
		if !s.registered[i] {
			continue
		}
		if len(s.queue) >= maxQueued {
			klog.InfoS("Fake event set full; dropping its oldest event", "node", f.node, "limit", maxQueued)
			s.queue = s.queue[1:]
		}
		s.queue = append(s.queue, gonvml.EventData{
			Device:    f.server.Devices[i],
			EventType: gonvml.EventTypeXidCriticalError,
			EventData: xid,
		})
		delivered++
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return delivered
}

// pop takes the oldest queued event; ret is ERROR_INVALID_ARGUMENT once the set is freed,
// ERROR_TIMEOUT when the queue is empty.
func (s *eventSet) pop() (gonvml.EventData, gonvml.Return) {
	s.fleet.mu.Lock()
	defer s.fleet.mu.Unlock()
	if s.freed {
		return gonvml.EventData{}, gonvml.ERROR_INVALID_ARGUMENT
	}
	if len(s.queue) == 0 {
		return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
	}
	ev := s.queue[0]
	s.queue = s.queue[1:]
	return ev, gonvml.SUCCESS
}

// Wait is nvmlEventSetWait: the oldest injected event, or ERROR_TIMEOUT after timeoutms
// milliseconds (real time: it simulates a blocking driver call).
func (s *eventSet) Wait(timeoutms uint32) (gonvml.EventData, gonvml.Return) {
	timer := time.NewTimer(time.Duration(timeoutms) * time.Millisecond)
	defer timer.Stop()
	for {
		ev, ret := s.pop()
		if ret != gonvml.ERROR_TIMEOUT {
			return ev, ret
		}
		select {
		case <-s.wake:
		case <-timer.C:
			return s.pop()
		}
	}
}

// Free is nvmlEventSetFree; a second Free answers ERROR_INVALID_ARGUMENT.
func (s *eventSet) Free() gonvml.Return {
	s.fleet.mu.Lock()
	defer s.fleet.mu.Unlock()
	if s.freed {
		return gonvml.ERROR_INVALID_ARGUMENT
	}
	s.freed = true
	s.queue = nil
	delete(s.fleet.sets, s)
	return gonvml.SUCCESS
}

// Wait_v3 and the operational-event calls are not simulated: ERROR_NOT_SUPPORTED.
func (s *eventSet) Wait_v3(uint32) (gonvml.EventSetWaitData_v3, gonvml.Return) {
	return gonvml.EventSetWaitData_v3{}, gonvml.ERROR_NOT_SUPPORTED
}

// GetContextCount_v1 is not simulated: ERROR_NOT_SUPPORTED.
func (s *eventSet) GetContextCount_v1() (gonvml.GetContextCount_v1, gonvml.Return) {
	return gonvml.GetContextCount_v1{}, gonvml.ERROR_NOT_SUPPORTED
}

// GetContextData_v1 is not simulated: ERROR_NOT_SUPPORTED.
func (s *eventSet) GetContextData_v1(d gonvml.GetContextData_v1) (gonvml.GetContextData_v1, gonvml.Return) {
	return d, gonvml.ERROR_NOT_SUPPORTED
}

// GetContextInfo_v1 is not simulated: ERROR_NOT_SUPPORTED.
func (s *eventSet) GetContextInfo_v1(uint32) (gonvml.GetContextInfo_v1, gonvml.Return) {
	return gonvml.GetContextInfo_v1{}, gonvml.ERROR_NOT_SUPPORTED
}

// GetGpuOperationalEventContextLegacyXid_v1 is not simulated: ERROR_NOT_SUPPORTED.
func (s *eventSet) GetGpuOperationalEventContextLegacyXid_v1(uint32) (uint32, gonvml.Return) {
	return 0, gonvml.ERROR_NOT_SUPPORTED
}

// RegisterGpuOperationalEvents_v1 is not simulated: ERROR_NOT_SUPPORTED.
func (s *eventSet) RegisterGpuOperationalEvents_v1(*gonvml.GpuOperationalEventConfig_v1) gonvml.Return {
	return gonvml.ERROR_NOT_SUPPORTED
}
