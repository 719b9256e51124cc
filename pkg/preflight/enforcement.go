package preflight

import "github.com/hami-go/hami-go/pkg/device"

// This file checks the enforcement: HAMi-core's library or the MPS control daemon present.

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
	return miss(n, SeverityError, "enforcement "+device.CheckEnforcementMode(in.Enforcement).Error())
}
