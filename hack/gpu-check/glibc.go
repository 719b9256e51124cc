package main

import (
	"context"
	"fmt"
)

// imageGLIBCFloor is the oldest glibc of a GPU container image hami-go supports
// (docs/runtimes.md): RHEL 8 / UBI 8 and Rocky Linux 8, the oldest glibc among NVIDIA's CUDA
// 12 and 13 base images, and what HAMi v2.10.0 builds its libvgpu.so on
// (nvidia/cuda:13.3.0-cudnn-devel-ubi8). HAMi-core is preloaded into every GPU container and
// loads against the image's glibc: a library that imports a newer GLIBC_x.y does not load there.
const imageGLIBCFloor = "2.28"

// hamiCoreGLIBCCheck compares the newest GLIBC_x.y symbol version libvgpu.so (the
// hami-core-build result) imports with floor: a staged prebuilt (shipped) library fails above
// it; one built on the GPU machine only reports it.
func hamiCoreGLIBCCheck(ctx context.Context, h host, out, floor string) Result {
	r := Result{Name: "hami-core-glibc", Raw: []string{"raw/hami-core-build.json"}}
	b, err := readHAMiCoreBuild(out)
	switch {
	case err != nil:
		r.Status, r.Reason = Fail, "no HAMi-core build result (raw/hami-core-build.json): "+err.Error()
		return r
	case b.Status != Pass:
		r.Status, r.Reason = b.Status, "HAMi-core build: "+b.Reason
		return r
	}
	need, _, err := requiredGLIBC([]string{b.Library})
	if err != nil {
		r.Status, r.Reason = Fail, "cannot read libvgpu.so's symbol versions: "+err.Error()
		return r
	}
	v := Value{What: "libvgpu.so's newest GLIBC_x.y symbol version", Want: fmt.Sprintf("<= %s (the oldest image glibc supported: RHEL 8 / UBI 8, docs/runtimes.md)", floor),
		Got: orText(need, "none")}
	v.OK = need == "" || compareVersions(need, floor) <= 0
	if b.Prebuilt {
		v.Note = "the staged prebuilt library (" + short(b.SHA256) + "), as shipped"
	} else {
		have, _ := machineGLIBC(ctx, h)
		v.Note = fmt.Sprintf("built on this machine (glibc %s): the requirement follows the build machine's glibc, not the shipped library's "+
			"(stage that with HAMI_GO_HAMI_CORE_LIB); report-only, within the floor: %v", orText(have, "unknown"), v.OK)
		// A library built here says nothing of the shipped one: a GPU machine on glibc >= 2.34
		// builds one that needs GLIBC_2.34 (dlsym moved there) whatever HAMi ships.
		v.Want, v.OK = "report-only for a library built on this machine", true
	}
	r.Values = []Value{v, {What: "HAMi-core version", Want: "report-only", Got: b.Version, OK: true}}
	r.finish()
	if r.Status == Fail {
		r.Reason = fmt.Sprintf("libvgpu.so needs GLIBC_%s, newer than glibc %s of the oldest supported image: it would not load there (%s)", need, floor, v.Note)
	}
	return r
}
