package nvml_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// TestWatchXIDsOnGoNVMLMock scripts go-nvml's mock event set: a failed wait (the watcher pauses
// on its clock), an ECC event (ignored), an XID without a device (sent for every watched GPU),
// an XID on GPU 1. GPU 2 does not support XID events and is not watched.
func TestWatchXIDsOnGoNVMLMock(t *testing.T) {
	s := dgxh100.New()
	for i := 0; i < 3; i++ {
		ret := gonvml.SUCCESS
		if i == 2 {
			ret = gonvml.ERROR_NOT_SUPPORTED
		}
		mockDevice(s, i).RegisterEventsFunc = func(types uint64, _ gonvml.EventSet) gonvml.Return {
			if types != gonvml.EventTypeXidCriticalError {
				return gonvml.ERROR_INVALID_ARGUMENT
			}
			return ret
		}
	}
	script := []struct {
		data gonvml.EventData
		ret  gonvml.Return
	}{
		{ret: gonvml.ERROR_UNKNOWN},
		{data: gonvml.EventData{Device: s.Devices[0], EventType: gonvml.EventTypeSingleBitEccError}},
		{data: gonvml.EventData{EventType: gonvml.EventTypeXidCriticalError, EventData: 48}},
		{data: gonvml.EventData{Device: s.Devices[1], EventType: gonvml.EventTypeXidCriticalError, EventData: 79}},
	}
	var mu sync.Mutex
	calls, freed := 0, 0
	s.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(uint32) (gonvml.EventData, gonvml.Return) {
				mu.Lock()
				defer mu.Unlock()
				if calls < len(script) {
					calls++
					return script[calls-1].data, script[calls-1].ret
				}
				time.Sleep(time.Millisecond)
				return gonvml.EventData{}, gonvml.ERROR_TIMEOUT
			},
			FreeFunc: func() gonvml.Return { mu.Lock(); freed++; mu.Unlock(); return gonvml.SUCCESS },
		}, gonvml.SUCCESS
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	b := nvml.NewBackend(s, nvml.Options{Clock: clk, ErrorPause: 5 * time.Second})
	u := func(i int) string { return mockDevice(s, i).UUID }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan device.XIDEvent, 8)
	done := make(chan error, 1)
	go func() { done <- b.WatchXIDs(ctx, []string{u(0), u(1), u(2)}, out) }()

	// The failed wait makes the watcher sleep 5s on the fake clock; nothing arrives until then.
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	select {
	case ev := <-out:
		t.Fatalf("event %+v before the error pause ended", ev)
	default:
	}
	clk.Step(5 * time.Second)
	later := now.Add(5 * time.Second)
	var got []device.XIDEvent
	for len(got) < 3 {
		select {
		case ev := <-out:
			got = append(got, ev)
		case <-time.After(30 * time.Second):
			t.Fatalf("got %d of 3 events: %+v", len(got), got)
		}
	}
	want := []device.XIDEvent{
		{UUID: u(0), XID: 48, Time: later}, {UUID: u(1), XID: 48, Time: later}, // unattributed: every watched GPU
		{UUID: u(1), XID: 79, Time: later},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events = %+v\nwant %+v", got, want)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchXIDs = %v, want context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if freed != 1 {
		t.Errorf("event set freed %d times, want 1", freed)
	}
}

func TestWatchXIDsRegistrationFails(t *testing.T) {
	s := dgxh100.New()
	s.EventSetCreateFunc = func() (gonvml.EventSet, gonvml.Return) {
		return &mock.EventSet{FreeFunc: func() gonvml.Return { return gonvml.SUCCESS }}, gonvml.SUCCESS
	}
	mockDevice(s, 0).RegisterEventsFunc = func(uint64, gonvml.EventSet) gonvml.Return { return gonvml.ERROR_NO_PERMISSION }
	err := nvml.NewBackend(s, nvml.Options{}).WatchXIDs(context.Background(), []string{mockDevice(s, 0).UUID}, nil)
	if !nvml.IsReturn(err, gonvml.ERROR_NO_PERMISSION) {
		t.Errorf("WatchXIDs = %v, want nvmlDeviceRegisterEvents ERROR_NO_PERMISSION", err)
	}
	// The raw mock has no event set at all: an error, not a panic.
	err = nvml.NewBackend(dgxh100.New(), nvml.Options{}).WatchXIDs(context.Background(), nil, nil)
	if err == nil {
		t.Error("WatchXIDs on a mock without EventSetCreate succeeded")
	}
}
