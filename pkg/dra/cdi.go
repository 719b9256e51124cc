package dra

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hami-go/hami-go/pkg/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// ClaimCDIDevice is the CDI id of a claim's device: "gpu.hami-go.io/claim=<claim UID>".
func ClaimCDIDevice(uid types.UID) string {
	return parser.QualifiedName(draapi.DriverName, CDIClass, string(uid))
}

// ClaimSpecName is the file name of a claim's CDI spec in the CDI directory (the CDI library's
// transient spec name, "gpu.hami-go.io-claim_<claim UID>.json").
func ClaimSpecName(uid types.UID) string {
	return cdi.GenerateTransientSpecName(draapi.DriverName, CDIClass, string(uid)) + ".json"
}

// ClaimSpec is a claim's CDI spec: one device named by the claim UID whose container edits are
// the env and mounts of the shared builder (gpuenv.Build), env sorted by name. Device nodes and
// driver libraries come from the NVIDIA Container Toolkit's own spec on real GPUs.
func ClaimSpec(uid types.UID, e gpuenv.Edits) *cdispec.Spec {
	env := make([]string, 0, len(e.Env))
	for k, v := range e.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	edits := cdispec.ContainerEdits{Env: env}
	for _, m := range e.Mounts {
		opts := []string{"bind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		edits.Mounts = append(edits.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: opts})
	}
	s := &cdispec.Spec{
		Kind:    CDIKind,
		Devices: []cdispec.Device{{Name: string(uid), ContainerEdits: edits}},
	}
	s.Version = cdispec.CurrentVersion
	if v, err := cdispec.MinimumRequiredVersion(s); err == nil {
		s.Version = v
	}
	return s
}

// cdiWriter writes and removes claim specs in one directory through the CDI library (which
// validates each spec and writes it atomically: temporary file, then rename).
type cdiWriter struct {
	cache *cdi.Cache
}

func newCDIWriter(dir string) (*cdiWriter, error) {
	c, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI directory --cdi-dir %s: %w", dir, err)
	}
	return &cdiWriter{cache: c}, nil
}

func (w *cdiWriter) write(uid types.UID, s *cdispec.Spec) error {
	if err := w.cache.WriteSpec(s, ClaimSpecName(uid)); err != nil {
		return fmt.Errorf("write the CDI spec of claim %s: %w", uid, err)
	}
	return nil
}

func (w *cdiWriter) remove(uid types.UID) error {
	if err := w.cache.RemoveSpec(ClaimSpecName(uid)); err != nil {
		return fmt.Errorf("remove the CDI spec of claim %s: %w", uid, err)
	}
	return nil
}
