// Package nvml is hami-go's device.Backend over NVIDIA's NVML, through github.com/NVIDIA/go-nvml
// (imported as gonvml). It works over ANY gonvml.Interface: the real driver library (Open), the
// go-nvml mock servers (tests), and pkg/fake's simulated fleets (fake mode), so fake mode runs the
// same discovery, health and usage code as a real node.
//
// Error rule: every NVML return code other than SUCCESS becomes an *Error that names the NVML
// call and the device. Optional attributes (SM count, NUMA node, MIG mode, NVLink peers) degrade
// to "unknown" when NVML answers NOT_SUPPORTED or FUNCTION_NOT_FOUND (an older driver), or when a
// go-nvml mock has no function for the call (its nil-Func panic is recovered and logged at -v=4).
// No NVML call lets a panic escape this package.
//
// go-nvml needs cgo; build with CGO_CFLAGS=-Wno-deprecated-declarations.
package nvml
