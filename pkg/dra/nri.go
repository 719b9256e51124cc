package dra

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/hami-go/hami-go/pkg/dra/draapi"
	"github.com/hami-go/hami-go/pkg/gpuenv"
	"github.com/hami-go/hami-go/pkg/nri"
)

var _ nri.Source = (*Driver)(nil)

// Plan implements nri.Source: the DRA driver never gives the device plugin's pending answer (a
// claim's CDI spec sets the whole env at prepare), so a container carrying it is refused.
func (d *Driver) Plan(_ context.Context, c nri.Container) (nri.Plan, error) {
	return nri.Plan{}, fmt.Errorf("container %s carries an empty %s, which the DRA driver never sets (only hami-go's device plugin does)", c, nri.MarkerEnv)
}

// Granted implements nri.Source for the NRI plugin in DRA mode (case C37): a container's
// GPUs are the hami-go claims among its CDI devices ("gpu.hami-go.io/claim=<claim UID>", the
// ids PrepareResourceClaims returned), and its env is what their CDI specs set (gpuenv.Build of
// each prepared claim; for a name two claims set, the later device's value, as the runtime
// applies the edits in order). A container without such a device has no GPUs from hami-go. A
// device naming a claim this driver has not prepared is an error (the NRI plugin refuses the
// container; the kubelet retries). With Config.ToolkitCDIKind, NVIDIA_VISIBLE_DEVICES is left out:
// the NVIDIA Container Toolkit's CDI spec, applied after the claim's, sets it to "void" (its
// spec-level edits: the devices come as CDI device nodes, not through that variable), so the
// NRI plugin empties it instead of refusing every GPU container.
func (d *Driver) Granted(_ context.Context, c nri.Container) (nri.Granted, error) {
	var out nri.Granted
	for _, name := range c.CDIDevices {
		vendor, class, dev, err := parser.ParseQualifiedName(name)
		if err != nil || vendor != draapi.DriverName || class != CDIClass {
			continue
		}
		uid := types.UID(dev)
		d.mu.Lock()
		p, ok := d.prepared[uid]
		d.mu.Unlock()
		if !ok {
			return nri.Granted{}, fmt.Errorf("CDI device %s names claim %s, which the DRA driver has not prepared", name, uid)
		}
		if out.Env == nil {
			out = nri.Granted{GPU: true, Env: map[string]string{}}
		}
		e := gpuenv.Build(d.cfg.envConfig(), envRequest(uid, p.Grants), d.opts.FileExists)
		for k, v := range e.Env {
			out.Env[k] = v
		}
		out.DriverCapabilities = gpuenv.MergeDriverCapabilities(out.DriverCapabilities, e.DriverCapabilities)
		if d.cfg.ToolkitCDIKind != "" {
			delete(out.Env, gpuenv.EnvNVIDIAVisibleDevices)
		}
	}
	return out, nil
}
