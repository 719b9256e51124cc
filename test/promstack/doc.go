// Package promstack runs a real Prometheus against the local cluster (hack/cluster) the way the
// chart's monitoring objects describe it: the ServiceMonitors of a rendered chart become scrape
// configurations with Kubernetes service discovery (role endpointslice, the cluster's kubeconfig)
// and the relabelling the Prometheus Operator generates for them, and the PrometheusRule's groups
// become a rule file.
//
// Network rule of the project's tests: every generated scrape configuration keeps only targets
// whose address lies in the networks it is given (loopback and the local cluster's own network
// namespaces), and the server listens on a loopback address only.
//
// Used by hack/prometheus (make prometheus-up) and by the e2e tests (test/e2e).
package promstack
