package metrics

import (
	"os"
	"regexp"
	"strconv"

	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
)

// PIDResolver maps a host process ID (as NVML reports it) to the runtime container ID it runs
// in; ok is false when unknown.
type PIDResolver func(pid uint32) (containerID string, ok bool)

var containerIDPattern = regexp.MustCompile(`[0-9a-f]{64}`)

// ProcCgroupResolver reads the container ID (the last 64 hex digits) from <procRoot>/<pid>/cgroup.
// procRoot must be a /proc of the host's PID namespace: NVML lists host PIDs, so a node agent in
// its own PID namespace reads the host's /proc mounted at HostProcDir (see NodeProcRoot).
// The container's cgroup path is shown relative to the reader's cgroup namespace (cgroup v2:
// "0::/../../kubepods…/cri-containerd-<id>.scope"), which still names the ID.
func ProcCgroupResolver(procRoot string) PIDResolver {
	return func(pid uint32) (string, bool) {
		b, err := os.ReadFile(procRoot + "/" + strconv.FormatUint(uint64(pid), 10) + "/cgroup")
		if err != nil {
			return "", false
		}
		all := containerIDPattern.FindAllString(string(b), -1)
		if len(all) == 0 {
			return "", false
		}
		return all[len(all)-1], true
	}
}

// HostProcDir is where the node agents' DaemonSets mount the host's /proc read-only (the
// chart's host-proc volume), for ProcCgroupResolver.
const HostProcDir = "/host/proc"

// NodeProcRoot is the /proc of the host's PID namespace as this process sees it: HostProcDir
// when mounted (its PID 1 exists), else /proc (an agent run with hostPID, or on the host).
func NodeProcRoot() string {
	if _, err := os.Stat(HostProcDir + "/1/cgroup"); err == nil {
		return HostProcDir
	}
	klog.InfoS("No host /proc mounted; per-slice GPU memory use maps NVML's host PIDs through /proc, which works only in the host's PID namespace (hostPID)", "want", HostProcDir)
	return "/proc"
}

// ProcessLister lists a GPU's processes (device.Backend.Processes).
type ProcessLister interface {
	Processes(uuid string) ([]device.ProcessMemory, error)
}

// AttributeUse is the one per-slice memory use of both node components: it lists the processes
// on GPU g through procs, sets g.UsedMiB (their sum) and g.UsedKnown, and adds each process's
// memory to use[k] where resolve maps its host PID to a container ID and owner maps that
// container to k (the device plugin's container slice, the DRA driver's claim). A process
// whose container is unknown (a pod's sandbox, a process outside Kubernetes) counts only in the
// GPU's use. It returns false when the GPU's processes could not be listed (g unchanged).
func AttributeUse[K comparable](procs ProcessLister, g *GPUSample, resolve PIDResolver, owner func(containerID string) (K, bool), use map[K]int64) bool {
	list, err := procs.Processes(g.UUID)
	if err != nil {
		klog.V(4).InfoS("No process list for metrics", "uuid", g.UUID, "err", err)
		return false
	}
	g.UsedKnown = true
	for _, pr := range list {
		g.UsedMiB += pr.UsedMiB
		if resolve == nil {
			continue
		}
		id, ok := resolve(pr.PID)
		if !ok {
			continue
		}
		if k, ok := owner(id); ok {
			use[k] += pr.UsedMiB
		}
	}
	return true
}
