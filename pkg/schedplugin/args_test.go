package schedplugin

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/extender"
)

func TestConfigFromArgs(t *testing.T) {
	def := extender.DefaultConfig()
	raw := func(s string) runtime.Object {
		return &runtime.Unknown{Raw: []byte(s), ContentType: runtime.ContentTypeJSON}
	}
	tests := []struct {
		name    string
		args    runtime.Object
		wantErr string
		check   func(t *testing.T, c extender.Config)
	}{
		{name: "nil: the extender's defaults", args: nil, check: func(t *testing.T, c extender.Config) {
			if c.SchedulerName != def.SchedulerName || c.NodePolicy != device.Binpack || c.Preemption != extender.PreemptionOwn ||
				c.StaleAfter != 60*time.Second || c.LeaseNamespace != "kube-node-lease" || c.Resources != device.DefaultResourceNames() {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "empty raw: defaults", args: raw(" "), check: func(t *testing.T, c extender.Config) {
			if c.SchedulerName != def.SchedulerName {
				t.Fatalf("%+v", c)
			}
		}},
		{name: "every field", args: raw(`{"schedulerName":"gpu","nodePolicy":"spread","gpuPolicy":"spread","preemption":"none",
			"leaseNamespace":"hami","inventoryStaleAfter":"90s","resources":{"memory":"example.com/mem"}}`),
			check: func(t *testing.T, c extender.Config) {
				want := device.DefaultResourceNames()
				want.Memory = "example.com/mem"
				if c.SchedulerName != "gpu" || c.NodePolicy != device.Spread || c.GPUPolicy != device.Spread || c.Preemption != extender.PreemptionNone ||
					c.LeaseNamespace != "hami" || c.StaleAfter != 90*time.Second || c.Resources != want || c.ReservationTTL != def.ReservationTTL {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "unknown field named", args: raw(`{"nodePolicyy":"spread"}`), wantErr: `unknown field "nodePolicyy"`},
		{name: "bad policy named", args: raw(`{"gpuPolicy":"tight"}`), wantErr: `gpuPolicy: "tight" is not binpack or spread`},
		{name: "verb preemption: kube-scheduler's", args: raw(`{"preemption":"verb"}`),
			check: func(t *testing.T, c extender.Config) {
				if c.Preemption != extender.PreemptionVerb {
					t.Fatalf("preemption %q, want verb", c.Preemption)
				}
			}},
		{name: "unknown preemption named", args: raw(`{"preemption":"kube"}`), wantErr: `preemption: "kube" is not own, verb or none`},
		{name: "stale duration", args: raw(`{"inventoryStaleAfter":"-1s"}`), wantErr: `inventoryStaleAfter: -1s is not positive`},
		{name: "empty scheduler name", args: raw(`{"schedulerName":""}`), wantErr: "schedulerName is empty"},
		{name: "bad resource", args: raw(`{"resources":{"count":""}}`), wantErr: "resources: "},
		{name: "malformed JSON", args: raw(`{"nodePolicy":`), wantErr: Name + " args: "},
		{name: "trailing data", args: raw(`{} {}`), wantErr: Name + " args: "},
		{name: "another case is unknown", args: raw(`{"nodepolicy":"spread"}`), wantErr: `unknown field "nodepolicy"`},
		{name: "wrong type", args: &corev1.Pod{}, wantErr: "got *v1.Pod, want *runtime.Unknown"},
		{name: "leader Lease and identity", args: raw(`{"leaderElectionLease":"hami/hami-go-scheduler","leaderIdentity":"pod-a"}`),
			check: func(t *testing.T, c extender.Config) {
				if c.LeaderLease != "hami/hami-go-scheduler" || c.Identity != "pod-a" {
					t.Fatalf("LeaderLease %q Identity %q", c.LeaderLease, c.Identity)
				}
			}},
		{name: "leader Lease, identity this host's", args: raw(`{"leaderElectionLease":"hami/hami-go-scheduler"}`),
			check: func(t *testing.T, c extender.Config) {
				if h, _ := os.Hostname(); c.Identity != h || h == "" {
					t.Fatalf("Identity %q, want the hostname %q", c.Identity, h)
				}
			}},
		{name: "no leader Lease: no identity", args: raw(`{"leaderIdentity":"pod-a"}`), check: func(t *testing.T, c extender.Config) {
			if c.LeaderLease != "" || c.Identity != "" {
				t.Fatalf("LeaderLease %q Identity %q", c.LeaderLease, c.Identity)
			}
		}},
		{name: "leader Lease without a namespace", args: raw(`{"leaderElectionLease":"hami-go-scheduler"}`), wantErr: "hami-go-scheduler"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ConfigFromArgs(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}
