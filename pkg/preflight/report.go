package preflight

import (
	"fmt"
	"strings"
)

// This file is the preflight's outcome: Finding, Report and the node Condition it becomes, and
// their klog key/values.

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
