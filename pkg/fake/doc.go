// Package fake simulates GPU fleets for CPU-only clusters (kind, CI, the local cluster) as a
// go-nvml library (gonvml.Interface), so the device plugin runs the very same pkg/nvml code in
// fake mode as on a real node: the backend interface is the only seam.
//
// A fleet is built from a Profile: one of go-nvml's mock DGX servers (dgxa100, dgxh100, dgxh200,
// dgxb200) or a custom mix of models ("2x24576:NVIDIA A10+2x81920:NVIDIA A100-SXM4-80GB"). UUIDs
// are deterministic per node and index. The mock's missing functions are filled in: NUMA node,
// attributes (SM count per model), NVLink (all-to-all on DGX profiles, none on custom ones),
// memory and compute processes from simulated usage, and an event set that delivers injected
// XIDs. Faults and usage are set at run time through InjectXID, Recover and SetUsage.
package fake
