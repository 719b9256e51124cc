package nvml

import (
	"errors"
	"fmt"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// Error is one NVML call that did not return SUCCESS (or panicked, in a go-nvml mock).
type Error struct {
	// Call is the NVML function, e.g. "nvmlDeviceGetMemoryInfo".
	Call string
	// Device names the GPU: its UUID, or "index N" before the UUID is known; "" for
	// library-wide calls.
	Device string
	// Return is NVML's return code; SUCCESS when Panic is set.
	Return gonvml.Return
	// Panic is the recovered panic value of a mock without a function for Call, else nil.
	Panic any
}

// Error formats as "nvmlDeviceGetMemoryInfo(GPU-…): ERROR_GPU_IS_LOST", or "nvmlInit:
// ERROR_LIBRARY_NOT_FOUND" for a library-wide call.
func (e *Error) Error() string {
	call := e.Call
	if e.Device != "" {
		call += "(" + e.Device + ")"
	}
	if e.Panic != nil {
		return fmt.Sprintf("%s: NVML library panicked: %v", call, e.Panic)
	}
	return fmt.Sprintf("%s: %s", call, e.Return.Error())
}

// IsReturn reports whether err is an NVML *Error carrying the return code r.
func IsReturn(err error, r gonvml.Return) bool {
	var e *Error
	return errors.As(err, &e) && e.Panic == nil && e.Return == r
}

// unsupported reports whether ret means "this attribute cannot be known here" rather than a
// failure: the GPU or driver lacks the feature, or the driver predates the function.
func unsupported(ret gonvml.Return) bool {
	return ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_FUNCTION_NOT_FOUND
}

// call runs one NVML query, turning a non-SUCCESS return or a panic into an *Error.
func call[T any](name, dev string, f func() (T, gonvml.Return)) (v T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			v, err = zero, &Error{Call: name, Device: dev, Panic: r}
		}
	}()
	v, ret := f()
	if ret != gonvml.SUCCESS {
		var zero T
		return zero, &Error{Call: name, Device: dev, Return: ret}
	}
	return v, nil
}

// optional runs an NVML query for an attribute that may be unknown. ok is false when NVML
// answers NOT_SUPPORTED/FUNCTION_NOT_FOUND or the library panics (a mock without the function);
// both are logged at -v=4. Any other failure is returned as an *Error.
func optional[T any](name, dev string, f func() (T, gonvml.Return)) (v T, ok bool, err error) {
	v, err = call(name, dev, f)
	if err == nil {
		return v, true, nil
	}
	var e *Error
	if errors.As(err, &e) && (e.Panic != nil || unsupported(e.Return)) {
		klog.V(4).InfoS("Optional NVML attribute unknown", "call", name, "device", dev, "reason", err.Error())
		var zero T
		return zero, false, nil
	}
	return v, false, err
}

// call0 adapts an NVML call that returns only a Return.
func call0(name, dev string, f func() gonvml.Return) error {
	_, err := call(name, dev, func() (struct{}, gonvml.Return) { return struct{}{}, f() })
	return err
}
