package preflight

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// base is a node that passes every check: containerd 2.4 with NRI, CDI on, runc default, no
// NVIDIA runtime, HAMi-core installed.
func base(t *testing.T) Input {
	return Input{
		RuntimeName: "containerd", RuntimeVersion: "v2.4.2", NRIConnected: true,
		Backend: BackendNVML, DeviceListStrategy: StrategyCDI, CDISpecDir: "/var/run/cdi",
		Enforcement: EnforceHAMiCore, EnforcementPresent: true, EnforcementDetail: "/usr/local/vgpu/libvgpu.so",
		Toolkit: toolkit(t, ""), Containerd: containerd(t, "v3-runc"),
	}
}

func TestEvaluate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(*Input)
		failOpen bool
		missing  []string
		// has: substrings each named finding's message must contain ("" = FailOpenReason).
		has map[string][]string
	}{{
		name: "no toolkit config, runc default, containerd CDI on: closed",
		edit: func(in *Input) {},
		has:  map[string][]string{FindingFailOpenWindow: {"closed", "default runtime is runc"}, FindingToolkitConfig: {"not found"}},
	}, {
		name: "toolkit default (key absent => true) with nvidia the default runtime: open",
		edit: func(in *Input) {
			in.Toolkit, in.Containerd = toolkit(t, "default"), containerd(t, "v3-nvidia-default")
		},
		failOpen: true,
		missing:  []string{FindingToolkitEnvvarWhenUnprivileged, FindingFailOpenWindow},
		has: map[string][]string{
			"": {"default runtime is nvidia", KeyAcceptEnvvarUnprivileged + " = true (unset: the default) in " + DefaultToolkitConfigPath,
				"set " + KeyAcceptEnvvarUnprivileged + " = false at the top of " + DefaultToolkitConfigPath, "make runc containerd's default runtime"},
			FindingToolkitEnvvarWhenUnprivileged: {"set it to false"},
		},
	}, {
		name:     "no toolkit config file but nvidia the default runtime: the toolkit's defaults hold, open",
		edit:     func(in *Input) { in.Containerd = containerd(t, "v3-nvidia-default") },
		failOpen: true,
		missing:  []string{FindingToolkitEnvvarWhenUnprivileged, FindingFailOpenWindow},
	}, {
		name: "key false with nvidia the default runtime: closed",
		edit: func(in *Input) {
			in.Toolkit, in.Containerd = toolkit(t, "envvar-false"), containerd(t, "v3-nvidia-default")
		},
		has: map[string][]string{FindingFailOpenWindow: {"closed", KeyAcceptEnvvarUnprivileged + " = false"}},
	}, {
		name: "mode cdi with key true: still open",
		edit: func(in *Input) {
			in.Toolkit, in.Containerd = toolkit(t, "cdi-mode-true"), containerd(t, "v3-nvidia-default")
		},
		failOpen: true,
		missing:  []string{FindingToolkitEnvvarWhenUnprivileged, FindingFailOpenWindow},
		has:      map[string][]string{"": {`(mode "cdi")`, KeyAcceptEnvvarUnprivileged + " = true in"}},
	}, {
		name: "toolkit installed (key default) but runc default and no NVIDIA handler: closed",
		edit: func(in *Input) { in.Toolkit = toolkit(t, "default") },
		has:  map[string][]string{FindingToolkitEnvvarWhenUnprivileged: {"no NVIDIA runtime is in a container's path"}},
	}, {
		name: "runc default but NVIDIA handlers a RuntimeClass can pick (k3s, GPU Operator): open",
		edit: func(in *Input) {
			in.Toolkit, in.Containerd = toolkit(t, "default"), containerd(t, "v2-nvidia-handler")
		},
		failOpen: true,
		missing:  []string{FindingToolkitEnvvarWhenUnprivileged, FindingFailOpenWindow},
		has:      map[string][]string{"": {"handler(s) nvidia, nvidia-cdi", "RuntimeClass", "remove the NVIDIA runtime handlers from containerd's config"}},
	}, {
		name: "volume mounts accepted with nvidia default, envvar key false: closed to images, a warning for hostPath pods",
		edit: func(in *Input) {
			in.Toolkit, in.Containerd = toolkit(t, "volume-mounts"), containerd(t, "v3-nvidia-default")
		},
		missing: []string{FindingToolkitVolumeMounts},
		has:     map[string][]string{FindingToolkitVolumeMounts: {"hostPath", "/var/run/nvidia-container-devices/all", "set it to false"}},
	}, {
		name: "envvar strategy: open and cannot be closed",
		edit: func(in *Input) {
			in.DeviceListStrategy, in.RuntimeVersion = StrategyEnvvar, "v2.0.4"
			in.Toolkit, in.Containerd = toolkit(t, "default"), containerd(t, "v3-nvidia-default")
		},
		failOpen: true,
		missing:  []string{FindingFailOpenWindow},
		has: map[string][]string{"": {"cannot be closed", "--device-list-strategy=cdi"},
			FindingRuntimeVersion: {">= 2.0"}, FindingCDIEnabled: {"not needed"}},
	}, {
		name: "envvar strategy with the key false: no GPUs at all",
		edit: func(in *Input) {
			in.DeviceListStrategy = StrategyEnvvar
			in.Toolkit, in.Containerd = toolkit(t, "envvar-false"), containerd(t, "v3-nvidia-default")
		},
		failOpen: true,
		missing:  []string{FindingToolkitEnvvarWhenUnprivileged, FindingFailOpenWindow},
		has:      map[string][]string{FindingToolkitEnvvarWhenUnprivileged: {"no GPUs at all"}},
	}, {
		name: "fake backend: not applicable",
		edit: func(in *Input) {
			in.Backend, in.DeviceListStrategy = BackendFake, StrategyEnvvar
			in.Toolkit, in.Containerd = toolkit(t, "default"), containerd(t, "v3-nvidia-default")
		},
		has: map[string][]string{FindingFailOpenWindow: {"fake backend: no GPUs to expose"}},
	}, {
		name: "containerd default runtime nvidia vs runc is the difference (runc, same toolkit): closed",
		edit: func(in *Input) { in.Toolkit = toolkit(t, "cdi-mode-true") },
	}, {
		name: "CRI-O 1.34 without a toolkit config: closed",
		edit: func(in *Input) {
			in.RuntimeName, in.RuntimeVersion, in.Containerd = "cri-o", "1.34.1", ContainerdConfig{}
		},
		has: map[string][]string{FindingRuntimeVersion: {"cri-o 1.34.1 >= 1.34"}, FindingCDIEnabled: {"CRI-O"}},
	}, {
		name: "CRI-O 1.33: too old",
		edit: func(in *Input) {
			in.RuntimeName, in.RuntimeVersion, in.Containerd = "cri-o", "1.33.2", ContainerdConfig{}
		},
		missing: []string{FindingRuntimeVersion},
		has:     map[string][]string{FindingRuntimeVersion: {"cri-o 1.33.2", "minimum 1.34", "upgrade cri-o to >= 1.34"}},
	}, {
		name: "CRI-O with the toolkit installed (hook or runtime possible) and the key default: open",
		edit: func(in *Input) {
			in.RuntimeName, in.RuntimeVersion, in.Containerd = "cri-o", "1.34.0", ContainerdConfig{}
			in.Toolkit = toolkit(t, "default")
		},
		failOpen: true,
		missing:  []string{FindingToolkitEnvvarWhenUnprivileged, FindingFailOpenWindow},
		has:      map[string][]string{"": {"CRI-O may run"}},
	}, {
		name:    "containerd 1.7 (cdi strategy, CDI off by default there)",
		edit:    func(in *Input) { in.RuntimeVersion, in.Containerd = "1.7.27", ContainerdConfig{} },
		missing: []string{FindingRuntimeVersion, FindingCDIEnabled},
		has: map[string][]string{FindingRuntimeVersion: {"containerd 1.7.27 is older than the minimum 2.1"},
			FindingCDIEnabled: {"CDI off by default", "enable_cdi = true"}},
	}, {
		name:    "containerd 2.0 with the cdi strategy: envvar only",
		edit:    func(in *Input) { in.RuntimeVersion = "v2.0.5" },
		missing: []string{FindingRuntimeVersion},
		has:     map[string][]string{FindingRuntimeVersion: {"minimum 2.1", "envvar strategy only"}},
	}, {
		name: "containerd 2.0 without the v, envvar strategy: ok",
		edit: func(in *Input) { in.RuntimeVersion, in.DeviceListStrategy = "2.0.0", StrategyEnvvar },
		// envvar is always a window on real GPUs.
		failOpen: true,
		missing:  []string{FindingFailOpenWindow},
	}, {
		name: "containerd 2.1 without the v: ok",
		edit: func(in *Input) { in.RuntimeVersion = "2.1.0" },
	}, {
		name:    "unsupported runtime",
		edit:    func(in *Input) { in.RuntimeName, in.RuntimeVersion = "docker", "28.0.1" },
		missing: []string{FindingRuntimeVersion},
	}, {
		name: "NRI not connected, containerd config turns NRI and CDI off",
		edit: func(in *Input) {
			in.RuntimeName, in.RuntimeVersion, in.NRIConnected = "", "", false
			in.Containerd = containerd(t, "v2-cdi-off")
		},
		missing: []string{FindingNRIConnected, FindingCDIEnabled, FindingCDISpecDir, FindingRuntimeVersion},
		has: map[string][]string{
			FindingNRIConnected:   {`plugins."io.containerd.nri.v1.nri".disable = true in ` + DefaultContainerdConfigPath, "set it to false"},
			FindingCDIEnabled:     {`plugins."io.containerd.grpc.v1.cri".enable_cdi = false`},
			FindingCDISpecDir:     {"/var/run/cdi", "/etc/cdi"},
			FindingRuntimeVersion: {"NRI never connected"},
		},
	}, {
		name: "NRI not connected, nothing known: generic hint",
		edit: func(in *Input) {
			in.RuntimeName, in.RuntimeVersion, in.NRIConnected, in.Containerd = "", "", false, ContainerdConfig{}
		},
		missing: []string{FindingNRIConnected, FindingRuntimeVersion},
		has:     map[string][]string{FindingNRIConnected: {"nri.sock", "Talos"}},
	}, {
		name: "malformed toolkit config: named with the parse error, defaults assumed (open with nvidia default)",
		edit: func(in *Input) {
			in.Toolkit, in.Containerd = toolkit(t, "malformed"), containerd(t, "v3-nvidia-default")
		},
		failOpen: true,
		missing:  []string{FindingToolkitConfig, FindingToolkitEnvvarWhenUnprivileged, FindingFailOpenWindow},
		has:      map[string][]string{FindingToolkitConfig: {DefaultToolkitConfigPath, "line 3", "defaults assumed"}},
	}, {
		name: "malformed containerd config with the toolkit installed: assumed reachable, open",
		edit: func(in *Input) {
			in.Toolkit, in.Containerd = toolkit(t, "default"), containerd(t, "malformed")
		},
		failOpen: true,
		missing:  []string{FindingContainerdConfig, FindingToolkitEnvvarWhenUnprivileged, FindingFailOpenWindow},
		has: map[string][]string{FindingContainerdConfig: {DefaultContainerdConfigPath, "line 3"},
			"": {"could not be read"}},
	}, {
		name:    "CDI spec dir outside cdi_spec_dirs (Talos-style dirs)",
		edit:    func(in *Input) { in.Containerd = containerd(t, "cdi-dirs") },
		missing: []string{FindingCDISpecDir},
		has:     map[string][]string{FindingCDISpecDir: {"/var/cdi/dynamic", "--cdi-spec-dir"}},
	}, {
		name: "/run/cdi is /var/run/cdi",
		edit: func(in *Input) { in.CDISpecDir = "/run/cdi/" },
	}, {
		name: "hami-core missing",
		edit: func(in *Input) {
			in.EnforcementPresent, in.EnforcementDetail = false, "/usr/local/vgpu/libvgpu.so: no such file"
		},
		missing: []string{FindingEnforcementPresent},
		has:     map[string][]string{FindingEnforcementPresent: {"libvgpu.so: no such file", "--enforcement=none"}},
	}, {
		name:    "MPS daemon unreachable",
		edit:    func(in *Input) { in.Enforcement, in.EnforcementPresent = EnforceMPS, false },
		missing: []string{FindingEnforcementPresent},
		has:     map[string][]string{FindingEnforcementPresent: {"MPS control daemon"}},
	}, {
		name: "enforcement none needs nothing",
		edit: func(in *Input) { in.Enforcement, in.EnforcementPresent = EnforceNone, false },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			in := base(t)
			tc.edit(&in)
			r := Evaluate(in)
			checkShape(t, r)
			if r.FailOpen != tc.failOpen {
				t.Errorf("FailOpen = %v (%s)", r.FailOpen, r.FailOpenReason)
			}
			var got []string
			for _, f := range r.Missing() {
				got = append(got, f.Name)
			}
			sort.Strings(got)
			want := append([]string(nil), tc.missing...)
			sort.Strings(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("missing %q, want %q", got, want)
				for _, f := range r.Findings {
					t.Logf("  %+v", f)
				}
			}
			for name, subs := range tc.has {
				msg := r.FailOpenReason
				if name != "" {
					f, _ := r.Finding(name)
					msg = f.Message
				}
				for _, s := range subs {
					if !strings.Contains(msg, s) {
						t.Errorf("%s message %q lacks %q", orReason(name), msg, s)
					}
				}
			}
		})
	}
}

func orReason(name string) string {
	if name == "" {
		return "FailOpenReason"
	}
	return name
}

var allFindings = []string{
	FindingRuntimeVersion, FindingNRIConnected, FindingCDIEnabled, FindingCDISpecDir, FindingToolkitCDISpec, FindingToolkitConfig,
	FindingContainerdConfig, FindingToolkitEnvvarWhenUnprivileged, FindingToolkitVolumeMounts,
	FindingEnforcementPresent, FindingFailOpenWindow,
}

// checkShape holds the invariants of every Report: every check once, in order; Info exactly when
// OK; a message always; FailOpen agreeing with the FailOpenWindow finding.
func checkShape(t *testing.T, r Report) {
	t.Helper()
	var names []string
	for _, f := range r.Findings {
		names = append(names, f.Name)
		if f.Message == "" {
			t.Errorf("%s: empty message", f.Name)
		}
		if f.OK != (f.Severity == SeverityInfo) {
			t.Errorf("%s: OK %v with severity %s", f.Name, f.OK, f.Severity)
		}
	}
	if !reflect.DeepEqual(names, allFindings) {
		t.Errorf("findings %q", names)
	}
	w, _ := r.Finding(FindingFailOpenWindow)
	if r.FailOpen == w.OK || (r.FailOpen != (r.FailOpenReason != "")) {
		t.Errorf("FailOpen %v, reason %q, finding %+v", r.FailOpen, r.FailOpenReason, w)
	}
}

func TestEvaluateZeroInput(t *testing.T) {
	r := Evaluate(Input{})
	checkShape(t, r)
	if r.Passed() {
		t.Error("an empty input passed")
	}
}

func TestCondition(t *testing.T) {
	in := base(t)
	c := Evaluate(in).Condition()
	if c != (Condition{Type: ConditionType, Status: "True", Reason: ConditionReasonPassed, Message: "all 11 checks passed"}) {
		t.Errorf("passing: %+v", c)
	}

	in.Toolkit, in.Containerd = toolkit(t, "default"), containerd(t, "v3-nvidia-default")
	in.NRIConnected = false
	in.EnforcementPresent = false
	r := Evaluate(in)
	c = r.Condition()
	if c.Type != ConditionType || c.Status != "False" || c.Reason != FindingFailOpenWindow {
		t.Errorf("failing: %+v", c)
	}
	for _, s := range []string{FindingNRIConnected + ": ", FindingEnforcementPresent + ": ", FindingToolkitEnvvarWhenUnprivileged + ": "} {
		if !strings.Contains(c.Message, s) && len(c.Message) < MaxConditionMessage {
			t.Errorf("message lacks %q: %s", s, c.Message)
		}
	}
	if len(c.Message) > MaxConditionMessage || !strings.HasSuffix(c.Message, "...") {
		t.Errorf("message of %d bytes not cut to %d: %q", len(c.Message), MaxConditionMessage, c.Message)
	}

	// Without the window, the most severe missing finding is the reason.
	in = base(t)
	in.RuntimeName, in.RuntimeVersion = "", ""
	if c := Evaluate(in).Condition(); c.Reason != FindingRuntimeVersion || c.Status != "False" {
		t.Errorf("warning only: %+v", c)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"0123456789", 8, "01234..."},
		{"aé€bc", 7, "aé..."}, // "€" (bytes 3-5) would straddle the cut at 4
	} {
		if got := truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestKeyValues(t *testing.T) {
	in := base(t)
	in.Toolkit, in.Containerd = toolkit(t, "default"), containerd(t, "v3-nvidia-default")
	r := Evaluate(in)
	kv := r.KeyValues()
	want := []any{"passed", false, "failOpen", true, "failOpenReason", r.FailOpenReason,
		"missing", FindingToolkitEnvvarWhenUnprivileged + "," + FindingFailOpenWindow}
	if !reflect.DeepEqual(kv, want) {
		t.Errorf("KeyValues %v", kv)
	}
	f, _ := r.Finding(FindingFailOpenWindow)
	if got := f.KeyValues(); !reflect.DeepEqual(got, []any{"check", FindingFailOpenWindow, "ok", false, "severity", "Error", "message", f.Message}) {
		t.Errorf("Finding.KeyValues %v", got)
	}
	if kv := Evaluate(base(t)).KeyValues(); !reflect.DeepEqual(kv, []any{"passed", true, "failOpen", false, "missing", ""}) {
		t.Errorf("passing KeyValues %v", kv)
	}
	for _, v := range append(kv, f.KeyValues()...) {
		switch v.(type) {
		case string, bool:
		default:
			t.Errorf("value %v (%T) is not a string or bool", v, v)
		}
	}
}

// The constants are the node agents' flag values, whose one home is pkg/device.
func TestConstantsMatchFlags(t *testing.T) {
	if EnforceHAMiCore != device.EnforcementHAMiCore || EnforceMPS != device.EnforcementMPS || EnforceNone != device.EnforcementNone {
		t.Error("enforcement constants differ from pkg/device")
	}
	if BackendNVML != device.BackendNVML || BackendFake != device.BackendFake || StrategyCDI != device.StrategyCDI || StrategyEnvvar != device.StrategyEnvvar {
		t.Error("backend or strategy constants differ from pkg/device")
	}
}
