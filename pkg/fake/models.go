package fake

import (
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/nvml"
)

// defaultSMs is the SM count of a model nvml.SMCountOf does not know (a mid-size GPU).
const defaultSMs = 80

// modelFacts are simulated hardware facts of one GPU model.
type modelFacts struct {
	// sms is the streaming multiprocessor count: nvml.SMCountOf, else defaultSMs.
	sms uint32
	// nvlinks is the number of NVLink links (DGX profiles only), 0 = none.
	nvlinks int
}

// nvlinkTable lists NVLink link counts per model token (NVIDIA datasheets: A100 12 links,
// H100/H200/B200 18). A function, not a package variable, so nothing can modify it.
func nvlinkTable() map[string]int {
	return map[string]int{"A100": 12, "H100": 18, "H200": 18, "B200": 18}
}

// factsFor returns the simulated facts of a model.
func factsFor(model string) modelFacts {
	f := modelFacts{sms: defaultSMs}
	if n := nvml.SMCountOf(model); n > 0 {
		f.sms = uint32(n)
	}
	for token, links := range nvlinkTable() {
		if device.ModelMatches(token, model) {
			f.nvlinks = links
		}
	}
	return f
}
