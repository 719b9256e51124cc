//go:build tools

// Package tools pins NVIDIA's Container Toolkit for the local cluster's simulated GPU node:
// nvidia-ctk (`cdi generate` over the simulated driver root), nvidia-cdi-hook (the hooks a
// generated CDI spec names) and nvidia-container-runtime (containerd's `nvidia` runtime, mode
// cdi, which needs no C library).
package tools

import (
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-cdi-hook"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-container-runtime"
	_ "github.com/NVIDIA/nvidia-container-toolkit/cmd/nvidia-ctk"
)
