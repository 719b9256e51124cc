//go:build tools

// Package tools pins Cluster Autoscaler's KWOK build (sigs.k8s.io/cluster-autoscaler/kwok: CA's
// core with only the kwok cloud provider) for hack/autoscaler/trial.sh. The Go module proxy
// refuses CA's modules, so go.mod's replace directives name source trees under src/, which
// hack/autoscaler/build.sh exports from git clones (the commits in hack/autoscaler/CA_VERSION
// and build.sh); the Kubernetes libraries are replaced by v0.37.2 like hack/tools/k8s.
package tools

import _ "sigs.k8s.io/cluster-autoscaler/kwok"
