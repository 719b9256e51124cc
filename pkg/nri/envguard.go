// Package nri is the node agents' NRI plugin (--nri-socket), run at container creation with two
// duties: apply a pod's plan where the device plugin's Allocate left it (device-plugin mode),
// and pin a container's protected env (device.IsProtectedEnv) to what hami-go gave it, or refuse
// the container where no adjustment can, so that image ENV, envFrom values and the pod's own env
// cannot widen a GPU slice (case C37, both modes). This file is the pure env decision (env in,
// adjustment out; no I/O); decide.go is Plugin.Decide, which applies it to a container; source.go
// holds the Source types the plugin reads plans through (Container, Plan, Granted, Source);
// drivercaps.go the driver-capabilities rule; plugin.go is the plugin (Plugin, its NRI
// callbacks, Run).
package nri

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// EnvChange is one NRI env adjustment: set Name=Value. A protected name hami-go did not set is
// "removed" by setting it empty: NRI v0.12.3 does not pass env removals on to the runtime (its
// adaptation drops them; measured on containerd 2.4.2), and an empty CUDA_VISIBLE_DEVICES,
// NVIDIA_VISIBLE_DEVICES or LD_PRELOAD names no GPU and preloads nothing.
type EnvChange struct {
	Name  string
	Value string
}

// RefusedError says why a container cannot be created: its env sets a protected name after
// hami-go's value (pod env or envFrom: they come last), or more than once where hami-go's answer
// put no entry of it, which no NRI adjustment can undo. Want is empty when hami-go set no value
// for Name (a container without GPUs, or a name the allocation does not use).
type RefusedError struct {
	Name  string
	Value string // the last value in the container's env, the one the process would see
	Want  string
	// HasWant is true when hami-go set Name for this container (to Want).
	HasWant bool
	// Repeated is true when hami-go's answer put no entry of Name in the env (a name its answer
	// leaves to the NRI plugin, the device plugin's pending answer; or one it does not set) and the env has more than one.
	Repeated bool
	// DeviceList is true for a GPU container's own CUDA_VISIBLE_DEVICES that names devices
	// where no adjustment can replace it (after hami-go's entries, or repeated).
	DeviceList bool
}

func (e *RefusedError) Error() string {
	switch {
	case e.DeviceList:
		return fmt.Sprintf("hami-go: the container's env sets %s=%s; the container sees only its own GPUs, in PCI bus order, and may "+
			"narrow them to none (%s=-1, none, void or empty) but not name devices, which would pair HAMi-core's per-GPU limits "+
			"with other GPUs (remove %s from the container's env and envFrom)", e.Name, e.Value, e.Name, e.Name)
	case e.HasWant && e.Repeated:
		return fmt.Sprintf("hami-go: the container's env sets %s more than once (last %s=%s); hami-go sets %s=%s for this container "+
			"and cannot override a repeated name (remove %s from the container's env, envFrom and image ENV)",
			e.Name, e.Name, e.Value, e.Name, e.Want, e.Name)
	case e.HasWant:
		return fmt.Sprintf("hami-go: the container's env sets %s=%s after the value %s=%s that hami-go allocated; "+
			"env, envFrom and image ENV may not change a GPU slice's limits (remove %s from the container's env)",
			e.Name, e.Value, e.Name, e.Want, e.Name)
	}
	return fmt.Sprintf("hami-go: the container's env sets %s=%s more than once; hami-go allocated this container no %s "+
		"and cannot remove a repeated name (remove %s from the container's env and envFrom)", e.Name, e.Value, e.Name, e.Name)
}

// PlanEnv returns the env adjustment that leaves every name hami-go set (want) exactly once in
// the container's env with hami-go's value, and closes what a protected name hami-go did not
// set could widen; or a *RefusedError when no adjustment can do so.
//
// env is the container's OCI process env as NRI delivers it at CreateContainer ("NAME=VALUE";
// entries without '=' are ignored): image ENV first, then the CRI env in the kubelet's order
// (the device plugin's env, then the container's envFrom and env values), duplicates kept
// (containerd 2.4, pkg/oci replaceOrAppendEnvValues). answer is the env hami-go's own answer put
// in env before the container's values: the device plugin's Allocate response or the DRA
// claims' CDI specs, which is want itself; or, for the device plugin, which applies the pod's
// plan at CreateContainer, only its pending answer. want is the env the container must run
// with (nil for a container without GPUs); a name is checked when it is protected
// (device.IsProtectedEnv) or hami-go sets it.
//
// What an adjustment can do follows from how containerd 2.4 applies it (NRI v0.12
// pkg/runtime-tools/generate AdjustEnv over containerd's spec generator, whose AddProcessEnv
// overwrites the first entry of a name): once any env adjustment is present, the list is rebuilt
// so that every name appears once, at its first position, with its LAST value, except that the
// first entry of an adjusted name takes the adjustment's value before the later entries are
// written over it; runc also keeps the last value of a repeated name (both measured on
// containerd 2.4.2 with Debian's runc 1.1.5). Hence, for a GPU container:
//   - a name of the answer whose last value is the answer's (for example image ENV before the
//     plugin's entry) is set to want's value, which also drops the earlier entries: when the two
//     differ (the pending answer's marker) only one entry may be there;
//   - a wanted name that is missing is added;
//   - a name of the answer whose last value differs (pod env or envFrom after the plugin's entry)
//     is refused: the later entry would win over any adjustment;
//   - a wanted name the answer left out (the pending answer) with an entry after the answer's is
//     refused: the container's own envFrom or env set it, and a tenant gets feedback rather than
//     a silent override;
//   - except (issue 36, case C54) where the container's last value only narrows: a device list
//     that names no device (gpuenv.NamesNoDevice: the container then sees no GPU), an LD_PRELOAD
//     that still lists hami-go's, and LIBCUDA_LOG_LEVEL (gpuenv.EnvHAMiLogLevel: set only
//     where the container has none); these are left as the container set them;
//   - a protected name hami-go did not set: LD_PRELOAD is left alone (HAMi-core comes from the
//     read-only /etc/ld.so.preload, which LD_PRELOAD does not unload; docs/threat-model.md says
//     what a tenant's own preload can do); a device list that names no device is left alone;
//     CUDA_VISIBLE_DEVICES naming devices once, before the answer (image ENV), is set to
//     gpuenv.IdentityCUDAVisibleDevices of the container's GPU count, and refused after it or
//     repeated; any other is emptied when it appears once and refused when it appears more
//     than once (the later entry's value would be written over the adjusted one).
//
// For a container without GPUs (want nil) only NVIDIA_VISIBLE_DEVICES can widen anything (the
// NVIDIA runtime gives the GPUs it names): a value naming devices is emptied, or refused when
// repeated; every other name, and a value naming no device, is left as it is (case C54).
//
// The changes are sorted by name. An error names the first refused name in name order.
func PlanEnv(env []string, answer, want map[string]string) ([]EnvChange, error) {
	last, count, late := scanEnv(env, answer, want)
	var changes []EnvChange
	for _, n := range envNames(last, want) {
		c, change, err := planName(n, answer, want, last, count, late)
		if err != nil {
			return nil, err
		}
		if change {
			changes = append(changes, c)
		}
	}
	return changes, nil
}

// scanEnv reads the checked names of env (those hami-go set, its answer's, the protected ones):
// each name's last value and its number of entries, and late, the checked names with an entry
// after the answer's first one.
func scanEnv(env []string, answer, want map[string]string) (last map[string]string, count map[string]int, late map[string]bool) {
	checked := func(name string) bool {
		_, w := want[name]
		_, a := answer[name]
		return w || a || device.IsProtectedEnv(name)
	}
	last = map[string]string{}
	count = map[string]int{}
	// late names the checked names with an entry after the answer's first one: the
	// container's own envFrom and env values, which the kubelet lists after the device plugin's.
	late = map[string]bool{}
	answerAt := -1
	for i, e := range env {
		name, value, ok := strings.Cut(e, "=")
		if !ok || !checked(name) {
			continue
		}
		last[name] = value
		count[name]++
		if a, answered := answer[name]; answered && a == value && answerAt < 0 {
			answerAt = i
		} else if answerAt >= 0 {
			late[name] = true
		}
	}
	return last, count, late
}

// envNames are the names PlanEnv decides on, sorted: those in the env (last) and the wanted
// ones missing from it.
func envNames(last, want map[string]string) []string {
	names := make([]string, 0, len(last)+len(want))
	for n := range last {
		names = append(names, n)
	}
	for n := range want {
		if _, seen := last[n]; !seen {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// planName decides, by PlanEnv's rules, on the name n, whose entries scanEnv read (last, count,
// late): the change to make (change true), none (change false), or a *RefusedError.
func planName(n string, answer, want, last map[string]string, count map[string]int, late map[string]bool) (c EnvChange, change bool, err error) {
	w, wanted := want[n]
	a, answered := answer[n]
	if want == nil {
		// A container without GPUs: only a device list the NVIDIA runtime reads can widen.
		if n != gpuenv.EnvNVIDIAVisibleDevices || gpuenv.NamesNoDevice(n, last[n]) {
			return EnvChange{}, false, nil
		}
		if count[n] > 1 {
			return EnvChange{}, false, &RefusedError{Name: n, Value: last[n]}
		}
		return EnvChange{Name: n}, true, nil
	}
	if count[n] > 0 && last[n] != w && narrows(n, last[n], w, wanted) {
		return EnvChange{}, false, nil
	}
	if !wanted {
		switch {
		case n == envLDPreload:
			return EnvChange{}, false, nil
		case n == gpuenv.EnvCUDAVisibleDevices && count[n] == 1 && (!late[n] || namesOwnGPUs(last[n], want)):
			if id := gpuenv.IdentityCUDAVisibleDevices(gpuCount(want)); id != "" {
				return EnvChange{Name: n, Value: id}, true, nil
			}
			return EnvChange{}, false, &RefusedError{Name: n, Value: last[n], DeviceList: true}
		case n == gpuenv.EnvCUDAVisibleDevices:
			return EnvChange{}, false, &RefusedError{Name: n, Value: last[n], DeviceList: true}
		}
	}
	switch {
	case answered && count[n] > 0 && last[n] != a:
		return EnvChange{}, false, &RefusedError{Name: n, Value: last[n], Want: a, HasWant: true}
	case answered && a != w && count[n] > 1:
		return EnvChange{}, false, &RefusedError{Name: n, Value: last[n], Want: w, HasWant: wanted, Repeated: true}
	case !answered && count[n] > 1:
		return EnvChange{}, false, &RefusedError{Name: n, Value: last[n], Want: w, HasWant: wanted, Repeated: wanted}
	case !answered && wanted && late[n]:
		return EnvChange{}, false, &RefusedError{Name: n, Value: last[n], Want: w, HasWant: true}
	}
	return EnvChange{Name: n, Value: w}, true, nil
}

const envLDPreload = "LD_PRELOAD"

// narrows reports whether a GPU container's own last value of name, which differs from
// hami-go's (w, set when wanted), can stay (PlanEnv): it names no device, it is an LD_PRELOAD
// list (colon- or space-separated, ld.so(8)) that still holds hami-go's library, or it sets
// HAMi-core's log level.
func narrows(name, value, w string, wanted bool) bool {
	switch name {
	case gpuenv.EnvNVIDIAVisibleDevices, gpuenv.EnvCUDAVisibleDevices:
		return gpuenv.NamesNoDevice(name, value)
	case gpuenv.EnvHAMiLogLevel:
		return true
	case envLDPreload:
		if !wanted {
			return false
		}
		for _, lib := range strings.FieldsFunc(value, func(r rune) bool { return r == ':' || r == ' ' }) {
			if lib == w {
				return true
			}
		}
	}
	return false
}

// gpuCount is the number of GPUs in want's HAMI_GO_GPU_UUIDS (0 when none).
// namesOwnGPUs reports whether a CUDA_VISIBLE_DEVICES value names exactly the container's own
// GPUs (HAMI_GO_GPU_UUIDS of its plan, in any order): what a previous release wrote into a DRA
// claim's CDI spec before issue 36, which a container of a claim prepared then still gets when
// it restarts after an upgrade. It widens nothing, so it becomes 0..n-1 like an image's list.
func namesOwnGPUs(value string, want map[string]string) bool {
	own := want[device.EnvGPUUUIDs]
	if own == "" || value == "" {
		return false
	}
	a, b := strings.Split(value, ","), strings.Split(own, ",")
	if len(a) != len(b) {
		return false
	}
	set := map[string]bool{}
	for _, u := range b {
		set[u] = true
	}
	for _, u := range a {
		if !set[u] {
			return false
		}
		delete(set, u)
	}
	return len(set) == 0
}

func gpuCount(want map[string]string) int {
	if u := want[device.EnvGPUUUIDs]; u != "" {
		return len(strings.Split(u, ","))
	}
	return 0
}
