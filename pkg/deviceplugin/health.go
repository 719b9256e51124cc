package deviceplugin

import (
	"k8s.io/utils/clock"

	"github.com/hami-go/hami-go/pkg/gpuhealth"
)

// Health is the GPU health state machine, shared with the DRA driver (pkg/gpuhealth).
type Health = gpuhealth.Health

// NewHealth tracks the given GPUs, all healthy (gpuhealth.New).
func NewHealth(uuids []string, appXIDs []uint64, recoveryProbes int, clk clock.PassiveClock) *Health {
	return gpuhealth.New(uuids, appXIDs, recoveryProbes, clk)
}
