package preflight

import (
	"fmt"
	"strings"
)

// This file checks the container runtime: its version, NRI, and whether its config files and
// the NVIDIA Container Toolkit's were read.

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
