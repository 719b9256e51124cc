//go:build tools

// Package tools pins helm.sh/helm/v3/cmd/helm for the local cluster.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
