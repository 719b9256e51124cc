// Package cliflags registers the command-line flags that several hami-go binaries share, so each
// is spelled, defaulted and documented once.
package cliflags

import (
	"github.com/spf13/pflag"

	"github.com/hami-go/hami-go/pkg/device"
)

// AddResourceNames registers --resource-count, --resource-memory, --resource-memory-percentage
// and --resource-cores, bound to n, with n's current values as defaults. Callers validate n
// (device.ResourceNames.Validate) after parsing.
func AddResourceNames(fs *pflag.FlagSet, n *device.ResourceNames) {
	fs.StringVar(&n.Count, "resource-count", n.Count, "extended resource: number of GPUs (each a slice); the device plugin advertises split-count devices per GPU under it")
	fs.StringVar(&n.Memory, "resource-memory", n.Memory, "extended resource: GPU memory per GPU, MiB (binary suffixes Mi/Gi are bytes)")
	fs.StringVar(&n.MemoryPercent, "resource-memory-percentage", n.MemoryPercent, "extended resource: GPU memory per GPU, percent 1..100")
	fs.StringVar(&n.Cores, "resource-cores", n.Cores, "extended resource: GPU compute per GPU, percent 0..100 (100 = exclusive)")
}
