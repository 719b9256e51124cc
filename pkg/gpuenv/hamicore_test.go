package gpuenv

import (
	"reflect"
	"strings"
	"testing"
)

var grants = []Grant{{UUID: "GPU-A", MemoryMiB: 4000, CoresPercent: 30}}

func hamiCfg() Config {
	return Config{Enforcement: EnforceHAMiCore, MemoryScaling: 1, HAMiCoreLibrary: "/usr/local/vgpu/libvgpu.so.v2.10.0"}
}

func all(string) bool { return true }

// Without HAMiCacheDir (today's behaviour) the cache file is in the container's root filesystem
// and nothing is mounted for it.
func TestBuildHAMiCacheLegacy(t *testing.T) {
	e := Build(hamiCfg(), Request{Grants: grants, CacheName: "main"}, all)
	if got := e.Env[EnvHAMiSharedCache]; got != "/usr/local/vgpu/main.cache" {
		t.Errorf("%s = %q", EnvHAMiSharedCache, got)
	}
	want := []Mount{
		{ContainerPath: "/usr/local/vgpu/libvgpu.so", HostPath: "/usr/local/vgpu/libvgpu.so.v2.10.0", ReadOnly: true},
		{ContainerPath: "/etc/ld.so.preload", HostPath: "/usr/local/vgpu/ld.so.preload", ReadOnly: true},
		{ContainerPath: "/overrideEnv", HostPath: "/dev/null", ReadOnly: true},
	}
	if !reflect.DeepEqual(e.Mounts, want) || e.Dirs != nil {
		t.Errorf("mounts %+v dirs %q, want %+v and none", e.Mounts, e.Dirs, want)
	}
	if _, ok := e.Env[EnvNVIDIADriverCapabilities]; ok || e.DriverCapabilities != "compute,utility" {
		t.Errorf("%s in env (%v), DriverCapabilities %q; want only DriverCapabilities compute,utility", EnvNVIDIADriverCapabilities, ok, e.DriverCapabilities)
	}
}

// With HAMiCacheDir every container gets its own writable host directory, which the caller
// creates, and the versioned library is mounted at the one container path.
func TestBuildHAMiCacheDir(t *testing.T) {
	cfg := hamiCfg()
	cfg.HAMiCacheDir = "/usr/local/vgpu/containers"
	e := Build(cfg, Request{Grants: grants, CacheName: "6f1c_main"}, all)
	if got := e.Env[EnvHAMiSharedCache]; got != "/usr/local/vgpu/cache/6f1c_main.cache" {
		t.Errorf("%s = %q", EnvHAMiSharedCache, got)
	}
	if e.DriverCapabilities != "compute,utility" {
		t.Errorf("DriverCapabilities = %q", e.DriverCapabilities)
	}
	want := []Mount{
		{ContainerPath: "/usr/local/vgpu/libvgpu.so", HostPath: "/usr/local/vgpu/libvgpu.so.v2.10.0", ReadOnly: true},
		{ContainerPath: "/etc/ld.so.preload", HostPath: "/usr/local/vgpu/ld.so.preload", ReadOnly: true},
		{ContainerPath: "/overrideEnv", HostPath: "/dev/null", ReadOnly: true},
		{ContainerPath: "/usr/local/vgpu/cache", HostPath: "/usr/local/vgpu/containers/6f1c_main"},
	}
	if !reflect.DeepEqual(e.Mounts, want) {
		t.Errorf("mounts %+v, want %+v", e.Mounts, want)
	}
	if !reflect.DeepEqual(e.Dirs, []string{"/usr/local/vgpu/containers/6f1c_main"}) {
		t.Errorf("dirs %q", e.Dirs)
	}
	// case C56: the host path of the file CUDA_DEVICE_MEMORY_SHARED_CACHE names, which the caller
	// removes before a (re)created container starts.
	if e.CacheFile != "/usr/local/vgpu/containers/6f1c_main/6f1c_main.cache" || e.Env[EnvHAMiSharedCache] != "/usr/local/vgpu/cache/6f1c_main.cache" {
		t.Errorf("cache file %q (env %q)", e.CacheFile, e.Env[EnvHAMiSharedCache])
	}
	// The cache directory does not depend on the library being there: HAMi-core brought by
	// the image itself needs it too.
	e = Build(cfg, Request{Grants: grants, CacheName: "6f1c_main"}, func(string) bool { return false })
	if len(e.Mounts) != 2 || e.Mounts[0].ContainerPath != HAMiOverrideEnv || e.Mounts[1].ContainerPath != HAMiContainerCacheDir || len(e.Dirs) != 1 {
		t.Errorf("without the library: mounts %+v dirs %q", e.Mounts, e.Dirs)
	}
}

// A name that is not one path element (the pending answer's empty request among them) gets no
// cache directory: never the parent directory itself, never a path outside it.
func TestBuildHAMiCacheDirInvalidName(t *testing.T) {
	cfg := hamiCfg()
	cfg.HAMiCacheDir = "/usr/local/vgpu/containers"
	for _, name := range []string{"", ".", "..", "../etc", "a/b", "a\x00b", strings.Repeat("n", 256)} {
		e := Build(cfg, Request{Grants: grants, CacheName: name}, all)
		if _, ok := e.Env[EnvHAMiSharedCache]; ok || len(e.Dirs) != 0 || len(e.Mounts) != 3 {
			t.Errorf("CacheName %q: env %q mounts %+v dirs %q", name, e.Env[EnvHAMiSharedCache], e.Mounts, e.Dirs)
		}
	}
	if !ValidCacheName(strings.Repeat("n", 255)) {
		t.Error("a 255-byte name is refused")
	}
}

// Other enforcement modes get neither the cache directory nor the capabilities.
func TestBuildHAMiOnlyUnderHAMiCore(t *testing.T) {
	for _, mode := range []string{EnforceNone, EnforceMPS} {
		cfg := hamiCfg()
		cfg.Enforcement, cfg.MPSPipeDir = mode, "/tmp/nvidia-mps"
		cfg.HAMiCacheDir = "/usr/local/vgpu/containers"
		e := Build(cfg, Request{Grants: grants, CacheName: "main"}, all)
		if e.DriverCapabilities != "" || len(e.Dirs) != 0 {
			t.Errorf("%s: env %v dirs %q", mode, e.Env, e.Dirs)
		}
	}
}

func TestMergeDriverCapabilities(t *testing.T) {
	for _, tc := range []struct{ have, want string }{
		{"", "compute,utility"},
		{"all", "all"},
		{"utility", "utility,compute"},
		{"compute,utility,video", "compute,utility,video"},
		{" graphics , display", "graphics,display,compute,utility"},
		{"compute,compute", "compute,utility"},
		{"video,all", "all"},
	} {
		if got := MergeDriverCapabilities(tc.have, HAMiCoreDriverCapabilities); got != tc.want {
			t.Errorf("MergeDriverCapabilities(%q) = %q, want %q", tc.have, got, tc.want)
		}
	}
}
