//go:build tools

// Package tools pins github.com/ray-project/kuberay/ray-operator for the local cluster.
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
