package fake

import (
	"fmt"

	"k8s.io/klog/v2"
)

// ApplicationXIDs are the XIDs the fake treats as application errors (13, 31, 43, 45, 68, 109,
// the device plugin's default --application-xids, after NVIDIA's k8s-device-plugin): injecting
// one only delivers the event; any other XID also breaks the GPU.
func ApplicationXIDs() []uint64 { return []uint64{13, 31, 43, 45, 68, 109} }

// isApplicationXID reports whether xid is in ApplicationXIDs.
func isApplicationXID(xid uint64) bool {
	for _, x := range ApplicationXIDs() {
		if x == xid {
			return true
		}
	}
	return false
}

// InjectXID delivers a critical XID event for the GPU to every event set it is registered on
// (what nvml.Backend.WatchXIDs waits on). A non-application XID (see ApplicationXIDs), e.g. 79
// "GPU has fallen off the bus", also breaks the GPU: its memory, process, attribute and
// utilization queries answer ERROR_GPU_IS_LOST, so Probe fails, until Recover. Error: unknown
// UUID.
func (f *Fleet) InjectXID(uuid string, xid uint64) error {
	i, err := f.index(uuid)
	if err != nil {
		return err
	}
	f.mu.Lock()
	delivered := f.deliverLocked(i, xid)
	broken := !isApplicationXID(xid)
	if broken {
		f.gpus[i].broken = true
	}
	f.mu.Unlock()
	klog.InfoS("Fake XID injected", "node", f.node, "uuid", uuid, "xid", xid, "broken", broken, "eventSets", delivered)
	return nil
}

// Recover makes a broken GPU answer queries again (its simulated usage is kept). Error:
// unknown UUID.
func (f *Fleet) Recover(uuid string) error {
	i, err := f.index(uuid)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.gpus[i].broken = false
	f.mu.Unlock()
	klog.InfoS("Fake GPU recovered", "node", f.node, "uuid", uuid)
	return nil
}

// SetUsage sets process pid's simulated memory use on the GPU to usedMiB (MiB); 0 removes the
// process. Memory info (Used/Free) and compute processes follow. Errors: unknown UUID, pid 0,
// negative usedMiB, or a total use above the GPU's memory; nothing changes then.
func (f *Fleet) SetUsage(uuid string, pid uint32, usedMiB int64) error {
	i, err := f.index(uuid)
	if err != nil {
		return err
	}
	if pid == 0 {
		return fmt.Errorf("fake usage on %s: pid 0 is not a process", uuid)
	}
	if usedMiB < 0 {
		return fmt.Errorf("fake usage on %s: usedMiB %d is negative", uuid, usedMiB)
	}
	total := f.profile.GPUs[i].MemoryMiB
	if usedMiB > total {
		return fmt.Errorf("fake usage on %s: usedMiB %d is more than the GPU's %d MiB", uuid, usedMiB, total)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gpus[i]
	sum := usedMiB
	for p, u := range g.procs {
		if p != pid {
			sum += u
		}
	}
	if sum > total {
		return fmt.Errorf("fake usage on %s: pid %d using %d MiB would bring the GPU to %d MiB of its %d MiB",
			uuid, pid, usedMiB, sum, total)
	}
	if usedMiB == 0 {
		delete(g.procs, pid)
	} else {
		g.procs[pid] = usedMiB
	}
	return nil
}
