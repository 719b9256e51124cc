package deviceplugin

import (
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// case C37: every variable the plugin hands a container, in every mode, is one a container may
// not set itself (device.IsProtectedEnv), so the webhook's rule covers all of them.
func TestAllocateEnvIsProtected(t *testing.T) {
	tests := []struct {
		name           string
		mode, strategy string // Config.Enforcement, Config.DeviceListStrategy
	}{
		{name: "hami-core/envvar", mode: gpuenv.EnforceHAMiCore, strategy: StrategyEnvvar},
		{name: "hami-core/cdi", mode: gpuenv.EnforceHAMiCore, strategy: StrategyCDI},
		{name: "mps/envvar", mode: gpuenv.EnforceMPS, strategy: StrategyEnvvar},
		{name: "mps/cdi", mode: gpuenv.EnforceMPS, strategy: StrategyCDI},
		{name: "none/envvar", mode: gpuenv.EnforceNone, strategy: StrategyEnvvar},
		{name: "none/cdi", mode: gpuenv.EnforceNone, strategy: StrategyCDI},
	}
	for _, tc := range tests {
		mode, strategy := tc.mode, tc.strategy
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t.TempDir())
			cfg.Enforcement, cfg.DeviceListStrategy, cfg.MemoryScaling = mode, strategy, 1.5
			p, _ := newTestPlugin(t, cfg, newTestBackend(2, 81920))
			p.resp.exists = func(path string) bool { return path == cfg.HAMiCoreLibrary } // no ld.so.preload: LD_PRELOAD env
			pod := testPod("p", t0, testNode, ctr{name: "c", mem: 1000, cores: 30, gpus: []string{"GPU-A", "GPU-B"}})
			p.Ledger().UpsertPod(pod)
			r := mustCreate(t, p, pod, "c", "GPU-A::0", "GPU-B::0")
			if len(r.Envs) < 4 {
				t.Fatalf("%s/%s: only %v", mode, strategy, r.Envs)
			}
			// NVIDIA_DRIVER_CAPABILITIES is the one name set that a container may widen: the NRI
			// plugin only adds the capabilities HAMi-core needs to the container's own.
			if got, want := r.Envs[gpuenv.EnvNVIDIADriverCapabilities], map[bool]string{true: "compute,utility"}[mode == gpuenv.EnforceHAMiCore]; got != want {
				t.Errorf("%s/%s: %s=%q, want %q", mode, strategy, gpuenv.EnvNVIDIADriverCapabilities, got, want)
			}
			// LIBCUDA_LOG_LEVEL is HAMi-core's log level, which widens no limit: the container's
			// own value wins (the NRI plugin sets it only where the container has none).
			for k := range r.Envs {
				if !device.IsProtectedEnv(k) && k != gpuenv.EnvNVIDIADriverCapabilities && k != gpuenv.EnvHAMiLogLevel {
					t.Errorf("%s/%s: the plugin sets %s, which a container could override", mode, strategy, k)
				}
			}
			if device.IsProtectedEnv(gpuenv.EnvHAMiLogLevel) {
				t.Errorf("%s is protected; a container may lower or raise HAMi-core's log level", gpuenv.EnvHAMiLogLevel)
			}
			if _, ok := r.Envs["LD_PRELOAD"]; mode == gpuenv.EnforceHAMiCore && !ok {
				t.Errorf("hami-core without ld.so.preload: no LD_PRELOAD in %v", r.Envs)
			}
		})
	}
}
