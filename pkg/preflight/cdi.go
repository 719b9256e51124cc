package preflight

import (
	"fmt"
	"path"
	"strings"
)

// This file checks CDI: the runtime injects CDI devices, reads hami-go's spec directory, and
// resolves the NVIDIA Container Toolkit's device for every GPU.

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
