// Package e2e holds the end-to-end tests of hami-go on the local cluster that
// hack/cluster/up.sh brings up (real kube-apiserver, kube-scheduler, kubelet, containerd and
// KubeRay; fake GPUs). The tests carry the build tag `e2e`:
//
//	hack/cluster/up.sh && go test -tags e2e -count=1 -v ./test/e2e/...
//
// The harness (harness.go) reads the kubeconfig from $HAMI_GO_STATE/kubeconfig (default
// /var/lib/hami-go-cluster/kubeconfig); it talks only to the API server on 10.200.0.1.
package e2e
