package nvml_test

import (
	"fmt"
	"strings"

	"github.com/hami-go/hami-go/pkg/device"
)

// fmtProcs prints processes as "[{pid MiB} ...]".
func fmtProcs(ps []device.ProcessMemory) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("{%d %d}", p.PID, p.UsedMiB)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
