package preflight

import (
	"fmt"
	"strings"
)

// This file decides the fail-open window (an image's NVIDIA_VISIBLE_DEVICES reaching the NVIDIA
// runtime) and checks the NVIDIA Container Toolkit keys that open it.

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
