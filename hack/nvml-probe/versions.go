package main

import (
	"fmt"
	"strconv"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

// versions is what NVML reports beyond device.Backend, for comparing with nvidia-smi
// (hack/gpu-check): the driver and CUDA versions and each GPU's compute capability.
type versions struct {
	// DriverVersion is nvmlSystemGetDriverVersion, e.g. "550.54.15".
	DriverVersion string `json:"driverVersion"`
	// CUDADriverVersion is nvmlSystemGetCudaDriverVersion as "<major>.<minor>", e.g. "12.4"
	// (NVML encodes it as 1000*major + 10*minor, nvml.h).
	CUDADriverVersion string `json:"cudaDriverVersion"`
	// ComputeCapability maps each GPU UUID to nvmlDeviceGetCudaComputeCapability as
	// "<major>.<minor>", e.g. "9.0".
	ComputeCapability map[string]string `json:"computeCapability"`
	// Errors lists the calls that failed; empty means every value above was read.
	Errors []string `json:"errors,omitempty"`
}

// cudaVersionString formats NVML's CUDA driver version integer (1000*major + 10*minor, e.g.
// 12040) as "12.4".
func cudaVersionString(v int) string {
	return strconv.Itoa(v/1000) + "." + strconv.Itoa((v%1000)/10)
}

// readVersions reads the driver and CUDA versions and the compute capability of each GPU in
// uuids from an initialized NVML library. A failing call (or a mock that panics on a nil
// function) is recorded in Errors and leaves its value empty.
func readVersions(lib gonvml.Interface, uuids []string) versions {
	v := versions{ComputeCapability: map[string]string{}}
	fail := func(call string, r any) { v.Errors = append(v.Errors, fmt.Sprintf("%s: %v", call, r)) }
	guard := func(call string, f func()) {
		defer func() {
			if r := recover(); r != nil {
				fail(call, r)
			}
		}()
		f()
	}
	guard("nvmlSystemGetDriverVersion", func() {
		s, ret := lib.SystemGetDriverVersion()
		if ret != gonvml.SUCCESS {
			fail("nvmlSystemGetDriverVersion", ret.Error())
			return
		}
		v.DriverVersion = s
	})
	guard("nvmlSystemGetCudaDriverVersion", func() {
		n, ret := lib.SystemGetCudaDriverVersion()
		if ret != gonvml.SUCCESS {
			fail("nvmlSystemGetCudaDriverVersion", ret.Error())
			return
		}
		v.CUDADriverVersion = cudaVersionString(n)
	})
	for _, u := range uuids {
		call := "nvmlDeviceGetCudaComputeCapability " + u
		guard(call, func() {
			h, ret := lib.DeviceGetHandleByUUID(u)
			if ret != gonvml.SUCCESS {
				fail("nvmlDeviceGetHandleByUUID "+u, ret.Error())
				return
			}
			major, minor, ret := h.GetCudaComputeCapability()
			if ret != gonvml.SUCCESS {
				fail(call, ret.Error())
				return
			}
			v.ComputeCapability[u] = strconv.Itoa(major) + "." + strconv.Itoa(minor)
		})
	}
	return v
}
