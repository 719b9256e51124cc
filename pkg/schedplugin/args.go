package schedplugin

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	sjson "sigs.k8s.io/json"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
)

// Args are the plugin's arguments (pluginConfig[].args of a KubeSchedulerConfiguration profile):
// the extender Config's user-facing fields, named and meaning as cmd/scheduler-extender's flags
// (docs/components.md). A field left out keeps extender.DefaultConfig's value.
type Args struct {
	// SchedulerName is the profile whose pods are hami-go's (--scheduler-name; default
	// "hami-go-scheduler"). Pods of other profiles are skipped.
	SchedulerName string `json:"schedulerName"`
	// NodePolicy and GPUPolicy are "binpack" or "spread" (--node-policy, --gpu-policy; default
	// binpack): the defaults a pod's hami.io/*-scheduler-policy annotations override.
	NodePolicy string `json:"nodePolicy"`
	GPUPolicy  string `json:"gpuPolicy"`
	// Preemption is which preemption frees GPUs for the plugin's pods (--preemption): "own"
	// (default: the extender's own preemption loop; kube-scheduler's DefaultPreemption never
	// frees GPUs), "verb" (kube-scheduler's only: DefaultPreemption, whose dry run Filter follows
	// through PreFilterExtensions, as the extender's verb mode takes kube-scheduler's through
	// its /preempt verb; no own loop) or "none" (no preemption frees GPUs).
	Preemption string `json:"preemption"`
	// LeaseNamespace holds the device plugins' Leases hami-go-<node> (--lease-namespace; default
	// kube-node-lease).
	LeaseNamespace string `json:"leaseNamespace"`
	// InventoryStaleAfter is the Lease age after which a node takes no GPU pods
	// (--inventory-stale-after; a duration such as "60s"; default 60s).
	InventoryStaleAfter metav1.Duration `json:"inventoryStaleAfter"`
	// Resources are the extended-resource names (--resource-*): count, memory, memoryPercent,
	// cores; a name left out keeps its default.
	Resources device.ResourceNames `json:"resources"`
	// LeaderElectionLease is "<namespace>/<name>" of this kube-scheduler's own leader-election
	// Lease (--leader-election-lease; default empty: none). Set, the extender under the plugin
	// places pods only while this host's kube-scheduler holds it, and after a takeover only once
	// the previous leader's binds are over (the bind API timeout, pkg/extender leader.go): a
	// Binding the old leader sent may still commit after it lost the Lease.
	LeaderElectionLease string `json:"leaderElectionLease"`
	// LeaderIdentity is the hostname in this kube-scheduler's leader identity
	// ("<hostname>_<uuid>"; --leader-identity); empty: this host's name, which is what
	// kube-scheduler uses.
	LeaderIdentity string `json:"leaderIdentity"`
}

// defaultArgs are Args filled from extender.DefaultConfig.
func defaultArgs() Args {
	d := extender.DefaultConfig()
	return Args{
		SchedulerName: d.SchedulerName, NodePolicy: string(d.NodePolicy), GPUPolicy: string(d.GPUPolicy),
		Preemption: string(d.Preemption), LeaseNamespace: d.LeaseNamespace,
		InventoryStaleAfter: metav1.Duration{Duration: d.StaleAfter}, Resources: d.Resources,
	}
}

// ConfigFromArgs decodes the plugin's args into an extender.Config: obj nil (no pluginConfig for
// the plugin) gives the defaults; otherwise obj is a *runtime.Unknown whose Raw is a JSON object
// (what kube-scheduler passes for an out-of-tree plugin), decoded strictly over the defaults. It
// fails on another type, malformed JSON, an unknown field (named), and a bad value (the field
// and the value named), and runs extender.Config.Validate on the result.
func ConfigFromArgs(obj runtime.Object) (extender.Config, error) {
	a := defaultArgs()
	if obj != nil {
		u, ok := obj.(*runtime.Unknown)
		if !ok {
			return extender.Config{}, fmt.Errorf("%s args: got %T, want *runtime.Unknown (JSON)", Name, obj)
		}
		if len(bytes.TrimSpace(u.Raw)) > 0 {
			if err := decodeStrict(u.Raw, &a); err != nil {
				return extender.Config{}, fmt.Errorf("%s args: %w", Name, err)
			}
		}
	}
	cfg, err := a.config()
	if err != nil {
		return extender.Config{}, fmt.Errorf("%s args: %w", Name, err)
	}
	return cfg, nil
}

// decodeStrict decodes one JSON object from raw into a (fields absent from raw keep their
// values), refusing unknown fields, fields spelt in another case, duplicates and trailing data
// (sigs.k8s.io/json, as kube-scheduler decodes its in-tree plugins' args).
func decodeStrict(raw []byte, a *Args) error {
	strict, err := sjson.UnmarshalStrict(raw, a)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// config checks the fields Args names itself and returns the extender.Config they make (the
// extender's timers at their defaults), validated.
func (a Args) config() (extender.Config, error) {
	cfg := extender.DefaultConfig()
	for _, p := range []struct {
		field, v string
		dst      *device.Policy
	}{{"nodePolicy", a.NodePolicy, &cfg.NodePolicy}, {"gpuPolicy", a.GPUPolicy, &cfg.GPUPolicy}} {
		pol, err := device.ParsePolicy(p.field, p.v, "")
		if err != nil || pol == "" {
			return cfg, fmt.Errorf("%s: %q is not binpack or spread", p.field, p.v)
		}
		*p.dst = pol
	}
	switch m := extender.PreemptionMode(a.Preemption); m {
	case extender.PreemptionOwn, extender.PreemptionVerb, extender.PreemptionNone:
		cfg.Preemption = m
	default:
		return cfg, fmt.Errorf("preemption: %q is not own, verb or none", a.Preemption)
	}
	if a.SchedulerName == "" {
		return cfg, fmt.Errorf("schedulerName is empty")
	}
	if a.LeaseNamespace == "" {
		return cfg, fmt.Errorf("leaseNamespace is empty")
	}
	if a.InventoryStaleAfter.Duration <= 0 {
		return cfg, fmt.Errorf("inventoryStaleAfter: %v is not positive", a.InventoryStaleAfter.Duration)
	}
	if err := a.Resources.Validate(); err != nil {
		return cfg, fmt.Errorf("resources: %w", err)
	}
	cfg.SchedulerName, cfg.LeaseNamespace = a.SchedulerName, a.LeaseNamespace
	cfg.StaleAfter, cfg.Resources = a.InventoryStaleAfter.Duration, a.Resources
	if cfg.LeaderLease = a.LeaderElectionLease; cfg.LeaderLease != "" {
		if cfg.Identity = a.LeaderIdentity; cfg.Identity == "" {
			h, err := os.Hostname()
			if err != nil || h == "" {
				return cfg, fmt.Errorf("leaderElectionLease %q: this host's name (leaderIdentity) is unknown: %v", cfg.LeaderLease, err)
			}
			cfg.Identity = h
		}
	}
	return cfg, cfg.Validate()
}
