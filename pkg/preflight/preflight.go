// Package preflight names what a GPU node lacks for hami-go (issue 29 items 3 and 4): the
// container runtime and its version, NRI, CDI, the NVIDIA Container Toolkit's settings, the
// enforcement, and the fail-open window (a container whose hami-go plan was not applied still
// getting GPUs from its image's NVIDIA_VISIBLE_DEVICES). Evaluate is pure (Input in, Report out);
// config.go parses the node's config files from bytes; read.go is the only I/O, reading them
// from an fs.FS rooted at the host's /. A Report becomes a node condition (Report.Condition) and
// klog key/values (Report.KeyValues, Finding.KeyValues); publishing them is the caller's.
package preflight

import (
	"fmt"
	"path"
	"strings"
)

// Values of Input's string fields. They equal the node agents' flag values
// (pkg/cliflags.BackendNVML/BackendFake, pkg/deviceplugin.StrategyCDI/StrategyEnvvar,
// pkg/gpuenv.EnforceHAMiCore/EnforceMPS/EnforceNone), repeated here to keep this package free
// of their imports (a test holds them equal).
const (
	BackendNVML = "nvml"
	BackendFake = "fake"

	StrategyCDI    = "cdi"
	StrategyEnvvar = "envvar"

	EnforceHAMiCore = "hami-core"
	EnforceMPS      = "mps"
	EnforceNone     = "none"
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

// Severity ranks a Finding: SeverityInfo for a check that holds (or does not apply),
// SeverityWarning for one that could not be decided or degrades hami-go, SeverityError for one
// that breaks isolation or stops GPU containers from starting.
type Severity string

// Severities, least to most severe.
const (
	SeverityInfo    Severity = "Info"
	SeverityWarning Severity = "Warning"
	SeverityError   Severity = "Error"
)

func (s Severity) rank() int {
	switch s {
	case SeverityError:
		return 2
	case SeverityWarning:
		return 1
	}
	return 0
}

// Finding names: stable CamelCase ids, one per check, used as condition reasons and log keys.
const (
	FindingRuntimeVersion                = "RuntimeVersion"
	FindingNRIConnected                  = "NRIConnected"
	FindingCDIEnabled                    = "CDIEnabled"
	FindingCDISpecDir                    = "CDISpecDir"
	FindingToolkitCDISpec                = "ToolkitCDISpec"
	FindingToolkitConfig                 = "ToolkitConfig"
	FindingContainerdConfig              = "ContainerdConfig"
	FindingToolkitEnvvarWhenUnprivileged = "ToolkitEnvvarWhenUnprivileged"
	FindingToolkitVolumeMounts           = "ToolkitVolumeMounts"
	FindingEnforcementPresent            = "EnforcementPresent"
	FindingFailOpenWindow                = "FailOpenWindow"
	// FindingOldModeInUse is reported only during a mode switch (issue 28), while the node
	// agent arriving waits for the other mode's pods and agent to leave the node; it is then the
	// condition's reason.
	FindingOldModeInUse = "OldModeInUse"
)

// Finding is one check's outcome.
type Finding struct {
	// Name is the check's stable id (the Finding* constants).
	Name string
	// OK is true when the check holds or does not apply.
	OK bool
	// Severity is SeverityInfo when OK, else how bad the miss is.
	Severity Severity
	// Message names the setting, its value on this node and what to change (when not OK).
	Message string
}

// KeyValues returns the finding as klog key/values: "check", Name, "ok", OK, "severity",
// Severity, "message", Message (klog.InfoS("preflight", f.KeyValues()...)).
func (f Finding) KeyValues() []any {
	return []any{"check", f.Name, "ok", f.OK, "severity", string(f.Severity), "message", f.Message}
}

// Report is Evaluate's result.
type Report struct {
	// Findings are the checks in a fixed order (runtime, NRI, CDI, configs, toolkit,
	// enforcement, fail-open window); checks that do not apply to the node are OK.
	Findings []Finding
	// FailOpen is true when a container whose plan hami-go did not apply (its NRI plugin not
	// running, or a pod hami-go never saw) could still get GPUs from its image's
	// NVIDIA_VISIBLE_DEVICES (every CUDA base image sets it to "all").
	FailOpen bool
	// FailOpenReason says why, naming the setting to change; "" when FailOpen is false.
	FailOpenReason string
}

// Passed reports whether every finding is OK.
func (r Report) Passed() bool { return len(r.Missing()) == 0 }

// Missing returns the findings that are not OK, most severe first (the Findings order kept
// within a severity).
func (r Report) Missing() []Finding {
	var out []Finding
	for rank := 2; rank >= 0; rank-- {
		for _, f := range r.Findings {
			if !f.OK && f.Severity.rank() == rank {
				out = append(out, f)
			}
		}
	}
	return out
}

// Finding returns the finding named name and whether there is one.
func (r Report) Finding(name string) (Finding, bool) {
	for _, f := range r.Findings {
		if f.Name == name {
			return f, true
		}
	}
	return Finding{}, false
}

// ConditionType is the node condition type the preflight publishes.
const ConditionType = "hami-go.io/PreflightPassed"

// ConditionReasonPassed is the condition's reason when every check holds.
const ConditionReasonPassed = "PreflightPassed"

// MaxConditionMessage bounds Condition.Message (bytes): a node object is written often and
// its conditions travel with it.
const MaxConditionMessage = 1024

// Condition is a Kubernetes NodeCondition's content (k8s.io/api/core/v1.NodeCondition Type,
// Status, Reason, Message), kept as plain strings so this package needs no Kubernetes import.
type Condition struct {
	// Type is ConditionType.
	Type string
	// Status is "True" when every check holds, else "False".
	Status string
	// Reason is ConditionReasonPassed, or the Name of the most severe missing finding
	// (FindingOldModeInUse first during a mode switch, then FindingFailOpenWindow when the
	// window is open).
	Reason string
	// Message lists the missing findings as "Name: message", most severe first, joined by
	// "; " and cut to MaxConditionMessage bytes; "all N checks passed" when none is missing.
	Message string
}

// Condition returns the report as a node condition.
func (r Report) Condition() Condition {
	missing := r.Missing()
	if len(missing) == 0 {
		return Condition{Type: ConditionType, Status: "True", Reason: ConditionReasonPassed,
			Message: fmt.Sprintf("all %d checks passed", len(r.Findings))}
	}
	reason := missing[0].Name
	if f, ok := r.Finding(FindingFailOpenWindow); ok && !f.OK {
		reason = f.Name
	}
	if f, ok := r.Finding(FindingOldModeInUse); ok && !f.OK {
		reason = f.Name // what the rest (NRI not connected yet) follows from
	}
	parts := make([]string, len(missing))
	for i, f := range missing {
		parts[i] = f.Name + ": " + f.Message
	}
	return Condition{Type: ConditionType, Status: "False", Reason: reason,
		Message: truncate(strings.Join(parts, "; "), MaxConditionMessage)}
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - 3
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// KeyValues returns the report's summary as klog key/values: "passed", "failOpen",
// "failOpenReason" (when open), "missing" (the missing findings' names, comma-separated);
// log each Finding's own KeyValues for the detail.
func (r Report) KeyValues() []any {
	missing := r.Missing()
	names := make([]string, len(missing))
	for i, f := range missing {
		names[i] = f.Name
	}
	kv := []any{"passed", len(missing) == 0, "failOpen", r.FailOpen}
	if r.FailOpen {
		kv = append(kv, "failOpenReason", r.FailOpenReason)
	}
	return append(kv, "missing", strings.Join(names, ","))
}

func ok(name, msg string) Finding {
	return Finding{Name: name, OK: true, Severity: SeverityInfo, Message: msg}
}

func miss(name string, sev Severity, msg string) Finding {
	return Finding{Name: name, Severity: sev, Message: msg}
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

func checkRuntime(in Input, rt string) Finding {
	const n = FindingRuntimeVersion
	switch rt {
	case "":
		return miss(n, SeverityWarning, "container runtime unknown: NRI never connected, so the runtime and its version were not reported (need containerd >= "+
			minContainerd(in).short()+" or CRI-O >= "+MinCRIO.short()+")")
	case RuntimeContainerd, RuntimeCRIO:
	default:
		return miss(n, SeverityError, fmt.Sprintf("container runtime %q %s is not supported: use containerd >= %s or CRI-O >= %s",
			in.RuntimeName, in.RuntimeVersion, minContainerd(in).short(), MinCRIO.short()))
	}
	v, err := ParseVersion(in.RuntimeVersion)
	if err != nil {
		return miss(n, SeverityWarning, fmt.Sprintf("%s version %q unreadable (%v); need >= %s", rt, in.RuntimeVersion, err, minFor(in, rt).short()))
	}
	min := minFor(in, rt)
	if !v.AtLeast(min.Major, min.Minor) {
		msg := fmt.Sprintf("%s %s is older than the minimum %s for the %s device-list strategy: upgrade %s to >= %s",
			rt, in.RuntimeVersion, min.short(), strategyName(in), rt, min.short())
		if rt == RuntimeContainerd && in.DeviceListStrategy == StrategyCDI && v.AtLeast(MinContainerdEnvvar.Major, MinContainerdEnvvar.Minor) {
			msg += " (containerd 2.0 runs the envvar strategy only: its NRI cannot add CDI devices)"
		}
		return miss(n, SeverityError, msg)
	}
	return ok(n, fmt.Sprintf("%s %s >= %s", rt, in.RuntimeVersion, min.short()))
}

func (v Version) short() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

func minContainerd(in Input) Version {
	if in.DeviceListStrategy == StrategyEnvvar {
		return MinContainerdEnvvar
	}
	return MinContainerdCDI
}

func minFor(in Input, rt string) Version {
	if rt == RuntimeCRIO {
		return MinCRIO
	}
	return minContainerd(in)
}

func strategyName(in Input) string {
	if in.DeviceListStrategy == "" {
		return StrategyCDI
	}
	return in.DeviceListStrategy
}

// containerdAtLeast2 reports whether the runtime is containerd >= 2.0, or unknown (then the
// 2.x defaults are assumed: hami-go supports nothing older).
func containerdAtLeast2(in Input) bool {
	v, err := ParseVersion(in.RuntimeVersion)
	return err != nil || v.Major >= 2
}

func checkNRI(in Input, rt string) Finding {
	const n = FindingNRIConnected
	if in.NRIConnected {
		return ok(n, fmt.Sprintf("NRI connected (%s %s)", orUnknown(in.RuntimeName), in.RuntimeVersion))
	}
	nriKey := tomlTable("plugins", nriTable) + ".disable"
	var hint string
	switch {
	case rt == RuntimeCRIO:
		hint = "set enable_nri = true in [crio.nri] of /etc/crio/crio.conf (the default since CRI-O 1.30)"
	case in.Containerd.NRIDisable != nil && *in.Containerd.NRIDisable:
		hint = fmt.Sprintf("%s = true in %s: set it to false and restart containerd", nriKey, configName(in.Containerd))
	case in.Containerd.NRIDisable == nil && rt == RuntimeContainerd && !containerdAtLeast2(in):
		hint = fmt.Sprintf("containerd %s keeps NRI off by default: set %s = false in %s (or upgrade to containerd >= 2.1)",
			in.RuntimeVersion, nriKey, configName(in.Containerd))
	default:
		hint = fmt.Sprintf("check that the runtime's NRI socket (/var/run/nri/nri.sock) is mounted into hami-go's pod and that NRI is on (containerd: %s = false, the default since 2.0; CRI-O: enable_nri = true, the default since 1.30; Talos before 1.14 turns it off)", nriKey)
	}
	return miss(n, SeverityError, "NRI not connected: hami-go's NRI plugin cannot apply plans or check env; "+hint)
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown runtime"
	}
	return s
}

func configName(c ContainerdConfig) string {
	if c.Path == "" {
		return DefaultContainerdConfigPath
	}
	return c.Path
}

func checkCDI(in Input, rt string) Finding {
	const n = FindingCDIEnabled
	if in.DeviceListStrategy != StrategyCDI {
		return ok(n, "device-list strategy "+strategyName(in)+": CDI not needed")
	}
	switch rt {
	case RuntimeCRIO:
		return ok(n, "CRI-O injects CDI devices (always on)")
	case RuntimeContainerd, "":
	default:
		return ok(n, "CDI not checked for runtime "+rt)
	}
	c := in.Containerd
	key := criKey(c, "enable_cdi")
	if c.EnableCDI != nil {
		if *c.EnableCDI {
			return ok(n, fmt.Sprintf("%s = true in %s", key, configName(c)))
		}
		return miss(n, SeverityError, fmt.Sprintf("%s = false in %s: containerd will not inject hami-go's CDI devices; set it to true (the default since containerd 2.0) and restart containerd", key, configName(c)))
	}
	if rt == RuntimeContainerd && !containerdAtLeast2(in) {
		return miss(n, SeverityError, fmt.Sprintf("containerd %s has CDI off by default: set %s = true in %s, or upgrade to containerd >= 2.1", in.RuntimeVersion, key, configName(c)))
	}
	if rt == "" && !c.Found {
		return ok(n, "enable_cdi unset: on by default in containerd >= 2.0 (runtime not reported)")
	}
	return ok(n, "enable_cdi unset: on by default in containerd >= 2.0")
}

// criKey spells a key under the CRI plugin table the file uses (or version 3's when unknown).
func criKey(c ContainerdConfig, key string) string {
	t := c.CRITable
	if t == "" {
		t = tomlTable("plugins", criTableV3)
		if c.Found && c.Version == 2 {
			t = tomlTable("plugins", criTableV2)
		}
	}
	return t + "." + key
}

// normDir makes /var/run/x and /run/x (the same directory on every current distribution)
// compare equal, and drops trailing slashes.
func normDir(d string) string {
	d = path.Clean(d)
	if strings.HasPrefix(d+"/", "/var/run/") {
		d = strings.TrimPrefix(d, "/var")
	}
	return d
}

func checkCDISpecDir(in Input, rt string) Finding {
	const n = FindingCDISpecDir
	if in.DeviceListStrategy != StrategyCDI || in.CDISpecDir == "" {
		return ok(n, "no CDI spec directory to check")
	}
	if rt == RuntimeCRIO {
		return ok(n, "CRI-O's cdi_spec_dirs not read; hami-go writes "+in.CDISpecDir+" (CRI-O's defaults: /etc/cdi, /var/run/cdi)")
	}
	c := in.Containerd
	dirs, where := c.CDISpecDirs, criKey(c, "cdi_spec_dirs")+" in "+configName(c)
	if dirs == nil {
		dirs, where = DefaultCDISpecDirs, "containerd's default cdi_spec_dirs"
	}
	for _, d := range dirs {
		if normDir(d) == normDir(in.CDISpecDir) {
			return ok(n, fmt.Sprintf("hami-go's CDI spec directory %s is in %s %q", in.CDISpecDir, where, dirs))
		}
	}
	return miss(n, SeverityError, fmt.Sprintf("hami-go writes its CDI spec to %s, which is not in %s %q: add it to cdi_spec_dirs, or point hami-go's --cdi-spec-dir (chart: devicePlugin cdiSpecDir) at one of them",
		in.CDISpecDir, where, dirs))
}

// maxSpecErrors bounds the skipped specs a ToolkitCDISpec message lists.
const maxSpecErrors = 3

// checkToolkitCDISpec checks that every GPU resolves as <ToolkitCDIKind>=<UUID> in the
// runtime's CDI specs: a container naming a device no spec defines fails to start
// ("unresolvable CDI devices"), so a node without the NVIDIA Container Toolkit's spec fails
// every GPU container (case C55).
func checkToolkitCDISpec(in Input) Finding {
	const n = FindingToolkitCDISpec
	switch {
	case !realGPUs(in):
		return ok(n, "fake backend: not applicable")
	case in.ToolkitCDIKind == "":
		return ok(n, "no toolkit CDI kind (--toolkit-cdi-kind empty): hami-go names no NVIDIA Container Toolkit device")
	case in.DeviceListStrategy != StrategyCDI:
		return ok(n, "device-list strategy "+strategyName(in)+": no CDI device named")
	case len(in.GPUUUIDs) == 0:
		return ok(n, "no GPUs to resolve")
	}
	kind, s := in.ToolkitCDIKind, in.CDISpecs
	if s.Dirs == nil {
		return miss(n, SeverityWarning, "the runtime's CDI spec directories were not read (the host's root is not mounted into the agent): whether "+kind+"=<UUID> resolves is unknown")
	}
	have := make(map[string]bool, len(s.Devices))
	for _, d := range s.Devices {
		have[d] = true
	}
	var missing []string
	for _, u := range in.GPUUUIDs {
		if id := kind + "=" + u; !have[id] {
			missing = append(missing, id)
		}
	}
	where := "the CDI specs in " + strings.Join(s.Dirs, ", ")
	if len(s.Absent) > 0 {
		where += " (absent: " + strings.Join(s.Absent, ", ") + ")"
	}
	if len(missing) == 0 {
		return ok(n, fmt.Sprintf("every GPU (%d) resolves as %s=<UUID> in %s", len(in.GPUUUIDs), kind, where))
	}
	if len(s.Errors) > 0 {
		errs := s.Errors
		if len(errs) > maxSpecErrors {
			errs = append(errs[:maxSpecErrors:maxSpecErrors], fmt.Sprintf("%d more", len(s.Errors)-maxSpecErrors))
		}
		where += " (specs the runtime skips: " + strings.Join(errs, "; ") + ")"
	}
	msg := fmt.Sprintf("%s not defined by %s: every GPU container on this node fails to start (\"unresolvable CDI devices\"); generate the NVIDIA Container Toolkit's CDI spec naming the GPUs by UUID (nvidia-ctk cdi generate --device-name-strategy=uuid --output=/var/run/cdi/nvidia.yaml; the GPU Operator: cdi.enabled=true), or set --toolkit-cdi-kind (chart: devicePlugin.toolkitCDIKind) to the kind the node's spec defines, empty where the driver reaches containers otherwise",
		strings.Join(missing, ", "), where)
	return miss(n, SeverityError, msg)
}

func checkConfigFile(name, what string, found bool, p string, tried []string, err error, assumed string) Finding {
	t := ""
	if len(tried) > 0 {
		t = " (tried " + strings.Join(tried, ", ") + ")"
	}
	switch {
	case err != nil:
		return miss(name, SeverityWarning, fmt.Sprintf("%s unreadable: %v%s; %s", what, err, t, assumed))
	case found:
		return ok(name, what+" read from "+p+t)
	}
	return ok(name, what+" not found"+t+"; "+assumed)
}

// window is the fail-open decision and the NVIDIA runtime's reachability behind it.
type window struct {
	open bool
	// reachable is true when a container can run under the NVIDIA container runtime or hook.
	reachable bool
	// via says how ("default runtime nvidia (BinaryName ...)", "runtime handler nvidia, by RuntimeClass").
	via    string
	reason string
}

// nvidiaReach decides whether the NVIDIA runtime (or its OCI hook) is in some container's
// path, and says how. Unknown configurations count as reachable when the toolkit is installed:
// the check must not report a window closed that it could not see.
func nvidiaReach(in Input, rt string) (reachable bool, via string) {
	tk := in.Toolkit
	if rt == RuntimeCRIO {
		if tk.Found {
			return true, "the NVIDIA Container Toolkit is installed (" + tk.Path + ") and CRI-O may run its runtime or OCI hook for every container"
		}
		return false, "no NVIDIA Container Toolkit config found, so no NVIDIA runtime or hook assumed on CRI-O"
	}
	c := in.Containerd
	if !c.Found || c.Err != nil {
		if tk.Found {
			return true, "the NVIDIA Container Toolkit is installed (" + tk.Path + ") and containerd's runtimes could not be read"
		}
		return false, "no containerd runtime config (tried " + triedList(c.Tried) + ") and no NVIDIA Container Toolkit config (tried " + triedList(tk.Tried) + ") found"
	}
	if d := c.DefaultRuntime(); d.NVIDIA() {
		return true, fmt.Sprintf("containerd's default runtime is %s (BinaryName %q) in %s", d.Name, d.BinaryName, c.Path)
	}
	if rs := c.NVIDIARuntimes(); len(rs) > 0 {
		names := make([]string, len(rs))
		for i, r := range rs {
			names[i] = r.Name
		}
		return true, fmt.Sprintf("containerd's runtime handler(s) %s in %s run the NVIDIA runtime, and any pod naming a RuntimeClass for one gets it",
			strings.Join(names, ", "), c.Path)
	}
	return false, fmt.Sprintf("containerd's default runtime is %s and no runtime handler in %s runs nvidia-container-runtime", c.DefaultRuntime().Name, c.Path)
}

// triedList names the candidate paths a config was looked for at ("the defaults" when the
// caller did not say).
func triedList(tried []string) string {
	if len(tried) == 0 {
		return "the defaults"
	}
	return strings.Join(tried, ", ")
}

func failOpen(in Input, rt string) window {
	if !realGPUs(in) {
		return window{reason: "fake backend: no GPUs to expose"}
	}
	reachable, via := nvidiaReach(in, rt)
	w := window{reachable: reachable, via: via}
	if in.DeviceListStrategy == StrategyEnvvar {
		w.open = true
		w.reason = "device-list strategy envvar: GPUs are named in NVIDIA_VISIBLE_DEVICES, which the NVIDIA runtime must honour and an image sets itself, so the window cannot be closed; switch to --device-list-strategy=cdi (containerd >= 2.1 or CRI-O >= 1.34) and close it there"
		return w
	}
	if !reachable {
		w.reason = "closed: " + via + ", so only the CDI devices the runtime injects reach a container"
		if rt != RuntimeCRIO && in.Containerd.EnableCDI != nil && !*in.Containerd.EnableCDI {
			w.reason += " (CDI is off: see " + FindingCDIEnabled + ")"
		}
		return w
	}
	tk := in.Toolkit
	file := toolkitPath(tk)
	if !tk.AcceptEnvvarUnprivileged {
		w.reason = fmt.Sprintf("closed: %s, but %s = false in %s", via, KeyAcceptEnvvarUnprivileged, file)
		return w
	}
	w.open = true
	why := fmt.Sprintf("%s = %s in %s (mode %q), so an image's NVIDIA_VISIBLE_DEVICES=all exposes every GPU",
		KeyAcceptEnvvarUnprivileged, keyValue(tk), file, tk.Mode)
	fix := fmt.Sprintf("set %s = false at the top of %s", KeyAcceptEnvvarUnprivileged, orDefault(tk.Path, DefaultToolkitConfigPath))
	c := in.Containerd
	switch {
	case rt == RuntimeCRIO:
	case c.Found && c.Err == nil && !c.DefaultRuntime().NVIDIA():
		fix += ", or remove the NVIDIA runtime handlers from containerd's config (and the RuntimeClasses naming them), leaving GPUs to containerd's own CDI"
	default:
		fix += ", or make runc containerd's default runtime (drop default_runtime_name = \"nvidia\") and remove the NVIDIA runtime handlers, leaving GPUs to containerd's own CDI"
	}
	w.reason = via + "; " + why + ": " + fix
	return w
}

// toolkitPath names the toolkit config for a message: its path, or the default path marked
// absent (the toolkit's defaults then hold).
func toolkitPath(tk ToolkitConfig) string {
	if tk.Path == "" {
		return DefaultToolkitConfigPath + " (file absent)"
	}
	return tk.Path
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func keyValue(tk ToolkitConfig) string {
	if !tk.AcceptEnvvarUnprivilegedSet {
		return "true (unset: the default)"
	}
	return fmt.Sprint(tk.AcceptEnvvarUnprivileged)
}

func checkEnvvarKey(in Input, w window) Finding {
	const n = FindingToolkitEnvvarWhenUnprivileged
	tk := in.Toolkit
	file := toolkitPath(tk)
	if !realGPUs(in) {
		return ok(n, "fake backend: not applicable")
	}
	if in.DeviceListStrategy == StrategyEnvvar {
		if !tk.AcceptEnvvarUnprivileged {
			return miss(n, SeverityError, fmt.Sprintf("%s = false in %s: under the envvar strategy unprivileged containers then get no GPUs at all; use --device-list-strategy=cdi (recommended) or set it to true",
				KeyAcceptEnvvarUnprivileged, file))
		}
		return ok(n, fmt.Sprintf("%s = %s in %s (needed by the envvar strategy)", KeyAcceptEnvvarUnprivileged, keyValue(tk), file))
	}
	if !tk.AcceptEnvvarUnprivileged {
		return ok(n, fmt.Sprintf("%s = false in %s", KeyAcceptEnvvarUnprivileged, file))
	}
	if !w.reachable {
		return ok(n, fmt.Sprintf("%s = %s in %s, but no NVIDIA runtime is in a container's path (%s)", KeyAcceptEnvvarUnprivileged, keyValue(tk), file, w.via))
	}
	return miss(n, SeverityError, fmt.Sprintf("%s = %s in %s while %s: set it to false", KeyAcceptEnvvarUnprivileged, keyValue(tk), file, w.via))
}

func checkVolumeMounts(in Input, w window) Finding {
	const n = FindingToolkitVolumeMounts
	tk := in.Toolkit
	if !realGPUs(in) {
		return ok(n, "fake backend: not applicable")
	}
	if !tk.AcceptVolumeMounts {
		return ok(n, KeyAcceptVolumeMounts+" = false")
	}
	if !w.reachable {
		return ok(n, fmt.Sprintf("%s = true in %s, but no NVIDIA runtime is in a container's path", KeyAcceptVolumeMounts, toolkitPath(tk)))
	}
	return miss(n, SeverityWarning, fmt.Sprintf("%s = true in %s while %s: a pod allowed hostPath volumes that mounts /dev/null at /var/run/nvidia-container-devices/all gets every GPU; hami-go does not use volume-mount device lists, set it to false",
		KeyAcceptVolumeMounts, toolkitPath(tk), w.via))
}

func checkEnforcement(in Input) Finding {
	const n = FindingEnforcementPresent
	detail := ""
	if in.EnforcementDetail != "" {
		detail = " (" + in.EnforcementDetail + ")"
	}
	switch in.Enforcement {
	case EnforceNone, "":
		return ok(n, "enforcement none: devices are handed out without memory or compute limits")
	case EnforceHAMiCore:
		if in.EnforcementPresent {
			return ok(n, "HAMi-core library found"+detail)
		}
		return miss(n, SeverityError, "enforcement hami-core but HAMi-core's libvgpu.so was not found"+detail+": GPU slices would run without memory limits; install it at the --hami-core-library path (chart: hamiCoreLibrary) or set --enforcement=none")
	case EnforceMPS:
		if in.EnforcementPresent {
			return ok(n, "MPS control daemon reachable"+detail)
		}
		return miss(n, SeverityError, "enforcement mps but the MPS control daemon is not reachable"+detail+": check the chart's MPS control daemon (mps-control-daemon DaemonSet) on this node or set --enforcement=none")
	}
	return miss(n, SeverityError, fmt.Sprintf("enforcement %q is not hami-core, mps or none", in.Enforcement))
}
