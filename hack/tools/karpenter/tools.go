//go:build tools

// Package tools pins sigs.k8s.io/karpenter's KWOK build (its kwok cloud provider: instance types
// from a JSON file, nodes created as plain Node objects) for hack/autoscaler/trial.sh.
// v1.15.0 names go 1.26.9 in its go.mod: the build runs with GOTOOLCHAIN=go1.27.3.
package tools

import _ "sigs.k8s.io/karpenter/kwok"
