package nvml

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// sysfsNUMANode reads the NUMA node of the PCI device busID (NVML form "00000000:07:00.0")
// from <dir>/<0000:07:00.0>/numa_node, as NVIDIA's k8s-device-plugin does. ok is false when
// dir or busID is empty, the file cannot be read, or it holds -1 (no NUMA affinity).
func sysfsNUMANode(dir, busID string) (node int, ok bool) {
	if dir == "" || busID == "" {
		return -1, false
	}
	id := strings.ToLower(busID)
	// NVML pads the PCI domain to 8 hex digits; sysfs uses 4.
	if i := strings.Index(id, ":"); i == 8 && strings.HasPrefix(id, "0000") {
		id = id[4:]
	}
	path := filepath.Join(dir, id, "numa_node")
	b, err := os.ReadFile(path)
	if err != nil {
		klog.V(4).InfoS("NUMA node not readable from sysfs", "path", path, "err", err)
		return -1, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1, false
	}
	return n, true
}
