//go:build tools

// Package tools pins the Kubernetes programs the local cluster runs; hack/cluster builds them
// into a cache directory outside the checkout.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
