// Package preflight names what a GPU node lacks for hami-go (issue 29 items 3 and 4): the
// container runtime and its version, NRI, CDI, the NVIDIA Container Toolkit's settings, the
// enforcement, and the fail-open window (a container whose hami-go plan was not applied still
// getting GPUs from its image's NVIDIA_VISIBLE_DEVICES). Evaluate is pure (Input in, Report out);
// the checks sit by concern in runtime.go, cdi.go, failopen.go and enforcement.go, the Report in
// report.go; config.go parses the node's config files from bytes; read.go is the only I/O,
// reading them from an fs.FS rooted at the host's /. A Report becomes a node condition
// (Report.Condition) and klog key/values (Report.KeyValues, Finding.KeyValues); publishing them
// is the caller's.
package preflight

import (
	"strings"

	"github.com/hami-go/hami-go/pkg/device"
)

// Values of Input's string fields: the node agents' flag values, whose one home is pkg/device
// (device.BackendNVML/BackendFake, device.StrategyCDI/StrategyEnvvar,
// device.EnforcementHAMiCore/EnforcementMPS/EnforcementNone); these names are theirs.
const (
	BackendNVML = device.BackendNVML
	BackendFake = device.BackendFake

	StrategyCDI    = device.StrategyCDI
	StrategyEnvvar = device.StrategyEnvvar

	EnforceHAMiCore = device.EnforcementHAMiCore
	EnforceMPS      = device.EnforcementMPS
	EnforceNone     = device.EnforcementNone
)

// Runtime names as NRI's Configure reports them (api.ConfigureRequest.RuntimeName).
const (
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
)

// Minimum runtime versions hami-go supports: NRI that can add CDI devices to a container
// (what the cdi strategy's plans need) is in containerd 2.1 and CRI-O 1.34; the envvar strategy
// needs only NRI's env adjustments with repeated names kept (containerd 2.0).
var (
	MinContainerdCDI    = Version{2, 1, 0}
	MinContainerdEnvvar = Version{2, 0, 0}
	MinCRIO             = Version{1, 34, 0}
)

// Default CDI spec directories of containerd and CRI-O (CDI spec, "Spec directories").
var DefaultCDISpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// Input is everything Evaluate decides from; the caller gathers it (NRI's Configure, the node
// agent's flags, the enforcement probe, ReadToolkitConfig, ReadContainerdConfig).
type Input struct {
	// RuntimeName and RuntimeVersion are what NRI's Configure reported ("containerd", "v2.4.2";
	// "cri-o", "1.34.1"); empty when NRI never connected.
	RuntimeName, RuntimeVersion string
	// NRIConnected is true when hami-go's NRI plugin is registered with the runtime.
	NRIConnected bool
	// Backend is BackendNVML (real GPUs) or BackendFake (no GPUs to expose; nothing can fail
	// open).
	Backend string
	// DeviceListStrategy is StrategyCDI or StrategyEnvvar (--device-list-strategy); the DRA
	// driver always uses CDI.
	DeviceListStrategy string
	// CDISpecDir is where hami-go writes its CDI spec (--cdi-spec-dir); checked against the
	// runtime's cdi_spec_dirs. Empty skips the check.
	CDISpecDir string
	// Enforcement is EnforceHAMiCore, EnforceMPS or EnforceNone (--enforcement).
	Enforcement string
	// EnforcementPresent is true when the enforcement was found: HAMi-core's libvgpu.so on the
	// host, or the MPS control daemon's pipe answering. Ignored for EnforceNone.
	EnforcementPresent bool
	// EnforcementDetail says what was probed and what was found ("/usr/local/vgpu/libvgpu.so:
	// no such file"); it goes into the finding's message.
	EnforcementDetail string
	// Toolkit is the NVIDIA Container Toolkit config (ReadToolkitConfig).
	Toolkit ToolkitConfig
	// Containerd is containerd's config (ReadContainerdConfig); ignored on CRI-O.
	Containerd ContainerdConfig
	// OldModeInUse, when not empty, says what the agent waits for before it serves the node's
	// GPUs after a mode switch (nodeagent.ModeSwitchWait); it adds the error finding
	// FindingOldModeInUse.
	OldModeInUse string
	// ToolkitCDIKind is the NVIDIA Container Toolkit's CDI kind the agent names beside its own
	// CDI device for each GPU of a container, as <kind>=<UUID> (--toolkit-cdi-kind, e.g.
	// "nvidia.com/gpu"); "" = none, and FindingToolkitCDISpec does not apply.
	ToolkitCDIKind string
	// GPUUUIDs are the node's GPUs: each must resolve as <ToolkitCDIKind>=<UUID>.
	GPUUUIDs []string
	// CDISpecs is what ReadCDISpecs found in the runtime's CDI spec directories
	// (Input.RuntimeCDISpecDirs); the zero value: not read.
	CDISpecs CDISpecs
}

// CDISpecs is what the container runtime's CDI spec directories define, read the way the
// runtime reads them (the CDI library's cache: .json and .yaml files, invalid specs skipped,
// a device two specs of one directory define dropped).
type CDISpecs struct {
	// Dirs are the directories read (host paths, the runtime's order); nil: not read.
	Dirs []string
	// Absent are those of Dirs that do not exist on the host (or are not mounted into the
	// agent).
	Absent []string
	// Devices are the qualified device names ("vendor/class=name") the specs define, sorted.
	Devices []string
	// Errors are the specs the runtime skips, "path: error", sorted.
	Errors []string
}

// ToolkitCDIApplies reports whether FindingToolkitCDISpec has something to check: real GPUs
// named through CDI with a toolkit kind. The caller reads CDISpecs only then.
func (in Input) ToolkitCDIApplies() bool {
	return realGPUs(in) && in.ToolkitCDIKind != "" && in.DeviceListStrategy == StrategyCDI
}

// RuntimeCDISpecDirs returns the CDI spec directories the runtime reads: containerd's
// cdi_spec_dirs (Containerd.CDISpecDirs), else the defaults (DefaultCDISpecDirs, also CRI-O's).
func (in Input) RuntimeCDISpecDirs() []string {
	if runtimeKind(in.RuntimeName) != RuntimeCRIO && in.Containerd.CDISpecDirs != nil {
		return in.Containerd.CDISpecDirs
	}
	return DefaultCDISpecDirs
}

// Evaluate runs every check on in. It is pure and never panics on any Input.
func Evaluate(in Input) Report {
	rt := runtimeKind(in.RuntimeName)
	var r Report
	add := func(f Finding) { r.Findings = append(r.Findings, f) }
	if in.OldModeInUse != "" {
		add(miss(FindingOldModeInUse, SeverityError, "mode switch: GPU pods wait until the other mode has left the node: "+in.OldModeInUse))
	}
	add(checkRuntime(in, rt))
	add(checkNRI(in, rt))
	add(checkCDI(in, rt))
	add(checkCDISpecDir(in, rt))
	add(checkToolkitCDISpec(in))
	add(checkConfigFile(FindingToolkitConfig, "NVIDIA Container Toolkit config", in.Toolkit.Found, in.Toolkit.Path, in.Toolkit.Tried, in.Toolkit.Err,
		"defaults assumed ("+KeyAcceptEnvvarUnprivileged+" = true)"))
	if rt == RuntimeCRIO {
		add(ok(FindingContainerdConfig, "not used on CRI-O"))
	} else {
		add(checkConfigFile(FindingContainerdConfig, "containerd config", in.Containerd.Found, in.Containerd.Path, in.Containerd.Tried, in.Containerd.Err,
			"containerd's defaults assumed; an NVIDIA runtime is assumed reachable when the toolkit is installed"))
	}
	w := failOpen(in, rt)
	add(checkEnvvarKey(in, w))
	add(checkVolumeMounts(in, w))
	add(checkEnforcement(in))
	if w.open {
		r.FailOpen, r.FailOpenReason = true, w.reason
		add(miss(FindingFailOpenWindow, SeverityError, "fail-open window present: "+w.reason))
	} else {
		add(ok(FindingFailOpenWindow, w.reason))
	}
	return r
}

func realGPUs(in Input) bool { return in.Backend != BackendFake }

// runtimeKind normalises NRI's runtime name: RuntimeContainerd, RuntimeCRIO, "" (unknown:
// NRI not connected) or the name as given.
func runtimeKind(name string) string {
	switch n := strings.ToLower(strings.TrimSpace(name)); n {
	case "containerd", "io.containerd":
		return RuntimeContainerd
	case "cri-o", "crio":
		return RuntimeCRIO
	default:
		return n
	}
}
