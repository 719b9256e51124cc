package fake

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/hami-go/hami-go/pkg/device"
)

// Limits of a custom profile.
const (
	// MaxGPUs is the most GPUs one fake node may have, over all parts of a spec.
	MaxGPUs = 64
	// MaxModelLength is NVML's device name buffer (NVML_DEVICE_NAME_V2_BUFFER_SIZE 96) less
	// the terminating NUL.
	MaxModelLength = 95
)

// GPUSpec is one simulated GPU of a Profile.
type GPUSpec struct {
	// Model is the NVML device name, e.g. "NVIDIA A10".
	Model string
	// MemoryMiB is the total memory in MiB.
	MemoryMiB int64
}

// Profile describes a fake node's GPUs. Make one with ParseProfile.
type Profile struct {
	// Spec is the text the profile was parsed from (trimmed), e.g. "dgxh100".
	Spec string
	// Server is the go-nvml mock server ("dgxa100", "dgxh100", "dgxh200", "dgxb200"), or ""
	// for a custom spec.
	Server string
	// GPUs in NVML index order.
	GPUs []GPUSpec
	// NVLink is true when every GPU reaches every other over NVLink (the DGX profiles).
	NVLink bool
}

// namedServers maps each go-nvml mock server to its GPU configuration (8 GPUs each), from
// github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgx*/dgx*.go in v0.13.4-1.
func namedServers() map[string]gpus.Config {
	return map[string]gpus.Config{
		"dgxa100": gpus.A100_SXM4_40GB,
		"dgxh100": gpus.H100_SXM5_80GB,
		"dgxh200": gpus.H200_SXM5_141GB,
		"dgxb200": gpus.B200_SXM5_180GB,
	}
}

// ProfileNames returns the named profiles, sorted.
func ProfileNames() []string {
	names := make([]string, 0, 4)
	for n := range namedServers() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParseProfile reads a fake node's profile: a named go-nvml mock server ("dgxa100",
// "dgxh100", "dgxh200", "dgxb200": 8 NVLinked GPUs each) or a custom spec
// "<count>x<MiB>:<model>[+<count>x<MiB>:<model>...]", e.g. "8x81920:NVIDIA H100 80GB HBM3" or
// "2x24576:NVIDIA A10+2x81920:NVIDIA A100-SXM4-80GB" (GPUs in the order written, no NVLink).
// count is 1..MaxGPUs (in total too), MiB is 1..device.MaxGPUMemoryMiB, model is printable
// text of at most MaxModelLength bytes without "+". Errors name the part and the value.
//
// Node label values cannot hold spaces, ":" or "+", so a custom spec may also be written in a
// label-safe form, "<count>x<MiB>.<model>[_<count>x<MiB>.<model>...]" with the model as
// written, e.g. "2x24576.NVIDIA-A10_2x81920.NVIDIA-A100-SXM4-80GB" (model "NVIDIA-A10", which
// names the same tokens as "NVIDIA A10" for device.ModelMatches).
func ParseProfile(spec string) (Profile, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return Profile{}, fmt.Errorf("fake profile is empty: want one of %s or <count>x<MiB>:<model>[+...]",
			strings.Join(ProfileNames(), ", "))
	}
	if cfg, ok := namedServers()[spec]; ok {
		p := Profile{Spec: spec, Server: spec, NVLink: true}
		for i := 0; i < 8; i++ {
			p.GPUs = append(p.GPUs, GPUSpec{Model: cfg.Name, MemoryMiB: int64(cfg.MemoryMB)})
		}
		return p, nil
	}
	sep, parts := "+", strings.Split(spec, "+")
	if !strings.Contains(spec, ":") {
		if !strings.Contains(spec, ".") {
			return Profile{}, fmt.Errorf("fake profile %q is not a known profile (%s) nor <count>x<MiB>:<model>[+...] "+
				"(label form <count>x<MiB>.<model>[_...])", spec, strings.Join(ProfileNames(), ", "))
		}
		sep, parts = "_", strings.Split(spec, "_")
	}
	p := Profile{Spec: spec}
	for i, part := range parts {
		where := fmt.Sprintf("fake profile %q part %d %q", spec, i+1, part)
		if sep == "_" {
			// Label form: the first "." separates <count>x<MiB> from the model.
			part = strings.Replace(part, ".", ":", 1)
		}
		count, s, err := parsePart(part)
		if err != nil {
			return Profile{}, fmt.Errorf("%s: %w", where, err)
		}
		if len(p.GPUs)+count > MaxGPUs {
			return Profile{}, fmt.Errorf("%s: brings the node to %d GPUs, more than %d", where, len(p.GPUs)+count, MaxGPUs)
		}
		for j := 0; j < count; j++ {
			p.GPUs = append(p.GPUs, s)
		}
	}
	return p, nil
}

// parsePart reads "<count>x<MiB>:<model>".
func parsePart(part string) (int, GPUSpec, error) {
	head, model, ok := strings.Cut(part, ":")
	if !ok {
		return 0, GPUSpec{}, fmt.Errorf("want <count>x<MiB>:<model>")
	}
	cs, ms, ok := strings.Cut(strings.TrimSpace(head), "x")
	if !ok {
		return 0, GPUSpec{}, fmt.Errorf("%q is not <count>x<MiB>", head)
	}
	count, err := strconv.Atoi(cs)
	if err != nil || count < 1 || count > MaxGPUs {
		return 0, GPUSpec{}, fmt.Errorf("count %q is not a whole number in 1..%d", cs, MaxGPUs)
	}
	mem, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || mem < 1 || mem > device.MaxGPUMemoryMiB {
		return 0, GPUSpec{}, fmt.Errorf("memory %q is not a whole number of MiB in 1..%d", ms, device.MaxGPUMemoryMiB)
	}
	model = strings.TrimSpace(model)
	if model == "" {
		return 0, GPUSpec{}, fmt.Errorf("model is empty")
	}
	if len(model) > MaxModelLength {
		return 0, GPUSpec{}, fmt.Errorf("model %q is longer than %d bytes", model, MaxModelLength)
	}
	for _, r := range model {
		if !unicode.IsPrint(r) {
			return 0, GPUSpec{}, fmt.Errorf("model %q contains the unprintable character %q", model, r)
		}
	}
	return count, GPUSpec{Model: model, MemoryMiB: mem}, nil
}
