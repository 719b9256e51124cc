package deviceplugin

import (
	"context"
	"path"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/hami-go/hami-go/pkg/metrics"
)

// rpcBuckets are the latency buckets of the kubelet's calls, seconds: 100 µs to 105 s by factors
// of 4 (an Allocate answered at once takes well under a millisecond; a PreStartContainer that
// waits for the NRI plugin takes up to --plan-wait, at most 25 s).
var rpcBuckets = prometheus.ExponentialBuckets(0.0001, 4, 11)

// newRPCDuration is hami_go_device_plugin_request_duration_seconds{node, method, code}: how long
// each kubelet call on node took, by gRPC method (Allocate, GetDevicePluginOptions, ...) and
// status code (OK, FailedPrecondition, InvalidArgument, Internal, ...).
func newRPCDuration(node string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:        metrics.Namespace + "_device_plugin_request_duration_seconds",
		Help:        "Duration of the kubelet's device-plugin calls, by gRPC method and status code, seconds.",
		Buckets:     rpcBuckets,
		ConstLabels: prometheus.Labels{metrics.LabelNode: node},
	}, []string{"method", "code"})
}

// observeUnary records each unary call's duration (not the ListAndWatch stream's) (the plugin's clock) in p.rpcDuration. It is
// the outermost interceptor, so a call whose panic recoverUnary turned into Internal counts too.
func (p *Plugin) observeUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	start := p.opts.Clock.Now()
	resp, err := h(ctx, req)
	p.rpcDuration.WithLabelValues(path.Base(info.FullMethod), status.Code(err).String()).Observe(p.opts.Clock.Since(start).Seconds())
	return resp, err
}
