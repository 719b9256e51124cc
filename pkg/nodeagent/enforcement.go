package nodeagent

import (
	"sync"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/hamicore"
	"github.com/hami-go/hami-go/pkg/nri"
	"github.com/hami-go/hami-go/pkg/preflight"
)

// Enforcement is what a node agent knows of its node's slice enforcement, the one source both
// agents publish from (inventory, ResourceSlice, metrics) and fail closed on: the check on the
// host (gpuenv.CheckEnforcement, every time State is called), the HAMi-core library the agent
// installed, and the last preflight's fail-open window. Safe for concurrent use.
type Enforcement struct {
	env     func() gpuenv.Config
	backend device.Backend
	exists  func(string) bool

	mu        sync.Mutex
	installed hamicore.Installed
	last      preflight.Report
	oldMode   string
}

// SetOldModeInUse records what the agent waits for during a mode switch ("" once over;
// ModeSwitchWait.Report), for the preflight condition (preflight.Input.OldModeInUse).
func (e *Enforcement) SetOldModeInUse(msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.oldMode = msg
}

// NewEnforcement returns the enforcement of an agent whose env config env returns, on backend
// (the fake backend's is simulated: no GPU to enforce on), with exists reporting whether a host
// path exists.
func NewEnforcement(env func() gpuenv.Config, backend device.Backend, exists func(string) bool) *Enforcement {
	return &Enforcement{env: env, backend: backend, exists: exists}
}

// SetInstalled records the library the agent installed at start (Config.InstallHAMiCore): its
// version and sha256 are published while it is the library containers get.
func (e *Enforcement) SetInstalled(in hamicore.Installed) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.installed = in
}

// State returns the enforcement now: checked on the host, with the installed library's version
// and sha256 and the last preflight's fail-open window.
func (e *Enforcement) State() device.Enforcement {
	s := gpuenv.CheckEnforcement(e.env(), e.backend.Name() == BackendFake, e.exists)
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.Library != "" && s.Library == e.installed.Path {
		s.Version, s.SHA256 = e.installed.Version, e.installed.SHA256
	}
	s.FailOpen, s.FailOpenReason = e.last.FailOpen, e.last.FailOpenReason
	return s
}

// SetPreflight records the node's latest preflight report (Preflight.Run) and says whether its
// fail-open window changed (the agent then republishes).
func (e *Enforcement) SetPreflight(r preflight.Report) (changed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	changed = e.last.FailOpen != r.FailOpen || e.last.FailOpenReason != r.FailOpenReason
	e.last = r
	return changed
}

// PreflightInput is what the node's preflight checks that only the agent knows: the runtime and
// connection of its NRI plugin g, its device-list strategy (preflight.StrategyCDI or
// StrategyEnvvar) and CDI spec directory ("" skips that check), the enforcement found and,
// during a mode switch, what the agent waits for (SetOldModeInUse).
func (e *Enforcement) PreflightInput(g *nri.Plugin, strategy, cdiSpecDir string) preflight.Input {
	name, version, connected := g.Runtime()
	s := gpuenv.CheckEnforcement(e.env(), e.backend.Name() == BackendFake, e.exists)
	e.mu.Lock()
	oldMode := e.oldMode
	e.mu.Unlock()
	return preflight.Input{RuntimeName: name, RuntimeVersion: version, NRIConnected: connected, Backend: e.backend.Name(),
		DeviceListStrategy: strategy, CDISpecDir: cdiSpecDir, Enforcement: s.Mode, EnforcementPresent: s.Ready, EnforcementDetail: s.Reason,
		OldModeInUse: oldMode}
}
