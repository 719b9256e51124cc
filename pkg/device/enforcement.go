package device

import "fmt"

// Enforcement modes a node agent runs (--enforcement; the env each gives is pkg/gpuenv's). This
// is their one home: pkg/gpuenv, pkg/preflight and pkg/nodeagent use these.
const (
	// EnforcementHAMiCore limits each container in-process with HAMi-core's libvgpu.so.
	EnforcementHAMiCore = "hami-core"
	// EnforcementMPS limits each container through NVIDIA MPS client limits.
	EnforcementMPS = "mps"
	// EnforcementNone hands out devices only: the explicit way to run unenforced.
	EnforcementNone = "none"
)

// Enforcement is what a node agent knows of the slice enforcement on its node, published in its
// inventory (Inventory.Enforcement) and, in DRA mode, as ResourceSlice device attributes. It is
// a fact the agent checks, not its configuration: an enforcing mode whose library or daemon is
// missing is published with Ready false and the reason, and the node then takes no new GPU pods
// (Inventory.Unenforced).
type Enforcement struct {
	// Mode is EnforcementHAMiCore, EnforcementMPS or EnforcementNone.
	Mode string `json:"mode"`
	// Ready is true when the mode's enforcement is present: HAMi-core's library on the host
	// (hami-core), the MPS control daemon's pipe (mps); always true for none.
	Ready bool `json:"ready"`
	// Reason says what is missing when Ready is false, naming the path or setting.
	Reason string `json:"reason,omitempty"`
	// Library is the host path of the libvgpu.so containers are given (hami-core).
	Library string `json:"library,omitempty"`
	// Version and SHA256 identify the installed library (hami-core; "" = unknown).
	Version string `json:"version,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	// Simulated is true on the fake backend: there is no GPU to enforce on, and the env of the
	// mode is still given so that workloads see the contract.
	Simulated bool `json:"simulated,omitempty"`
	// FailOpen is true when a container that did not get its plan could still reach GPUs (the
	// NVIDIA runtime honours an image's NVIDIA_VISIBLE_DEVICES); FailOpenReason names the
	// setting to change (pkg/preflight).
	FailOpen       bool   `json:"failOpen,omitempty"`
	FailOpenReason string `json:"failOpenReason,omitempty"`
}

// IsEnforcementMode reports whether mode is EnforcementHAMiCore, EnforcementMPS or
// EnforcementNone.
func IsEnforcementMode(mode string) bool {
	switch mode {
	case EnforcementHAMiCore, EnforcementMPS, EnforcementNone:
		return true
	}
	return false
}

// CheckEnforcementMode returns nil when IsEnforcementMode(mode), else an error naming mode and
// the three modes; callers prefix the flag (--enforcement) or what they check.
func CheckEnforcementMode(mode string) error {
	if IsEnforcementMode(mode) {
		return nil
	}
	return fmt.Errorf("%q is not %s, %s or %s", mode, EnforcementHAMiCore, EnforcementMPS, EnforcementNone)
}

// Validate reports the first malformed field, naming it and its value.
func (e *Enforcement) Validate() error {
	if !IsEnforcementMode(e.Mode) {
		return fmt.Errorf("inventory.enforcement.mode: %q is not one of %s, %s, %s", e.Mode, EnforcementHAMiCore, EnforcementMPS, EnforcementNone)
	}
	if e.Mode == EnforcementNone && !e.Ready {
		return fmt.Errorf("inventory.enforcement.ready: false with mode %s, which needs nothing", EnforcementNone)
	}
	if !e.Ready && e.Reason == "" {
		return fmt.Errorf("inventory.enforcement.reason: empty while ready is false")
	}
	return nil
}

// Unenforced returns why the node may take no new GPU pods because its enforcement is missing,
// or "": an enforcing mode that is not Ready. An inventory without Enforcement (published by an
// agent older than the field) is not refused for it.
func (inv *Inventory) Unenforced() string {
	e := inv.Enforcement
	if e == nil || e.Ready {
		return ""
	}
	return "enforcement " + e.Mode + " missing on the node: " + e.Reason
}
