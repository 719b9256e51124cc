package fake

import "github.com/hami-go/hami-go/pkg/device"

// modelFacts are simulated hardware facts for a GPU model, matched by whole model tokens.
type modelFacts struct {
	// token names the model the way device.ModelMatches reads it, e.g. "A100".
	token string
	// sms is the streaming multiprocessor count (NVIDIA's product specifications).
	sms uint32
	// nvlinks is the number of NVLink links the model has (used only by DGX profiles).
	nvlinks int
}

// knownModels returns the table of simulated model facts. SM counts: H100 SXM5 132, H200 132,
// B200 148, A100 108 (NVIDIA architecture whitepapers and datasheets); the others from their
// datasheets. A function, not a package variable, so nothing can modify it.
func knownModels() []modelFacts {
	return []modelFacts{
		{token: "H100", sms: 132, nvlinks: 18},
		{token: "H200", sms: 132, nvlinks: 18},
		{token: "H20", sms: 78, nvlinks: 18},
		{token: "H800", sms: 132, nvlinks: 8},
		{token: "B200", sms: 148, nvlinks: 18},
		{token: "A100", sms: 108, nvlinks: 12},
		{token: "A800", sms: 108, nvlinks: 8},
		{token: "A30", sms: 56, nvlinks: 4},
		{token: "A10", sms: 72},
		{token: "A40", sms: 84, nvlinks: 4},
		{token: "L40S", sms: 142},
		{token: "L40", sms: 142},
		{token: "L4", sms: 58},
		{token: "T4", sms: 40},
		{token: "V100", sms: 80, nvlinks: 6},
	}
}

// defaultSMs is the SM count of a model the table does not know (a mid-size GPU, no NVLink).
const defaultSMs = 80

// factsFor returns the facts of the first table entry whose token the model contains as a whole
// token, else defaultSMs and no NVLink.
func factsFor(model string) modelFacts {
	for _, f := range knownModels() {
		if device.ModelMatches(f.token, model) {
			return f
		}
	}
	return modelFacts{sms: defaultSMs}
}
