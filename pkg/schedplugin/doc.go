// Package schedplugin is hami-go's GPU placement as kube-scheduler framework plugins: the plugin
// named Name ("HamiGo") for a kube-scheduler built with it (cmd/kube-scheduler-hami-go,
// app.WithPlugin(Name, New)), the second way to run hami-go's scheduling beside the extender
// (pkg/extender, reached over HTTP). It exists because the extender protocol itself costs: every
// pod's filter and prioritize calls carry every candidate node's name as JSON, about 2 ms of CPU
// per pod on both sides; in-process, the same verbs are function calls. With the build's
// HamiGoNodeResourcesFit in place of NodeResourcesFit (cmd/kube-scheduler-hami-go/nodefit: no
// regular expression per extended resource name and node), docs/bench/cpu.md measured the plugin
// build at 0.82 of kube-scheduler alone's throughput against the extender's 0.55; the chart's
// default stays the extender (it works with the cluster's own kube-scheduler from 1.30 on).
//
// The plugin is an adapter over one extender.Extender (its Cache and Scheduler, fed by its own
// informers: New starts Extender.Run with the factory's context), so placement, bookkeeping and
// the one-write bind are the extender's, byte for byte:
//
//   - PreFilter: pods that are not GPU pods of the configured scheduler name get Skip (Filter,
//     Score and Bind then leave them to the other plugins and DefaultBinder). A GPU request that
//     does not parse is UnschedulableAndUnresolvable; until the extender is ready (its cache
//     rebuilt from the API) the pod is Unschedulable with extender.ErrNotReady's reason and
//     retried. Otherwise the extender's Filter runs once over all nodes' names and its verdicts
//     are kept in the CycleState (which also leaves the extender's speculative reservation on
//     the best node).
//   - Filter answers each node from those verdicts: Unschedulable with the extender's reason, or
//     UnschedulableAndUnresolvable where preemption would not help.
//   - PostFilter (informational, always Unschedulable) drops that speculative reservation when
//     the pod fits no node after every plugin's Filter, so that it does not hold GPUs while the
//     pod waits, and notes the pod for the extender's requeue and own preemption with only the
//     nodes whose status is HamiGo's own refusal (they passed every other Filter: case C65);
//     PreFilter weighs without noting (extender.Scheduler.Weigh).
//   - PreScore runs the extender's Prioritize once over the nodes that passed every Filter;
//     Score returns its 0..10 (extenderv1.MaxExtenderPriority) scaled to 0..100
//     (fwk.MaxNodeScore) by ×10, as kube-scheduler scales an extender's scores; there is no
//     NormalizeScore. PreScore answers Skip for pods PreFilter skipped.
//   - Reserve books the pod on the chosen node (Scheduler.ReserveOn: Filter's reservation, or a
//     new one there; its refusal and preemption offer are dropped), so that the next scheduling cycle sees its GPUs taken while this pod's
//     binding cycle runs; Unreserve drops exactly that reservation (Cache.Unreserve: the pod is
//     not remembered as gone and can be scheduled again).
//   - Bind is Extender.Bind: one Binding that carries the planned allocation (device.AnnoPlanned)
//     and sets spec.nodeName in the same write. It answers Skip for pods that are not GPU pods
//     of ours, so that DefaultBinder (configured after it) binds them.
//
// GPU preemption (Args.Preemption): "own" is the extender's own loop (inside Extender.Run), for
// the nodes HamiGo refused (PostFilter's note); "verb" is kube-scheduler's DefaultPreemption, as
// the extender's verb mode takes kube-scheduler's through its /preempt verb: PreFilterExtensions'
// AddPod and RemovePod record the pods its dry run removes and adds back on a node, and Filter
// weighs the pod again there (extender.Cache.FitWithChange), so that it chooses GPU victims
// (case C66); "none" frees no GPUs. With own or none PreFilterExtensions is nil (Filter keeps
// PreFilter's verdicts), so that DefaultPreemption and the own loop never both preempt. With
// Args.LeaderElectionLease (the chart sets it to kube-scheduler's own Lease) the extender's
// leader hand-over applies as with the sidecar (pkg/extender leader.go): PreFilter answers its
// refusal while another holds the Lease and, after a takeover, for the bind API timeout, since a
// Binding the previous leader sent before it lost the Lease may still commit. The plugin implements neither EnqueueExtensions (pods it rejects are requeued
// on any cluster event, the framework's default) nor SignPlugin (kube-scheduler's batching of
// identical pods is off). The extender's metrics (hami_go_extender_*: GPUs and
// slices booked; the per-verb series stay the sidecar's, kube-scheduler's own
// scheduler_plugin_execution_duration_seconds{plugin="HamiGo"} times the plugin, in the 10 % of
// cycles kube-scheduler samples) are served by
// kube-scheduler's /metrics on its secure port: New registers them on component-base's
// legacyregistry, Close takes them off.
package schedplugin
