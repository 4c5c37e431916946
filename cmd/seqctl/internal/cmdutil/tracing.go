package cmdutil

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracing is the span export of seqctl run, configured by the standard OpenTelemetry
// variables: traces go out over OTLP/HTTP when OTEL_TRACES_EXPORTER is "otlp" or an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), to
// the endpoint, with the headers, timeout and compression those variables give;
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the service ("seqctl" by default);
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG sample; OTEL_BSP_* tune the batching.
// Without them (or with OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true) no span is
// made, and the publishers' trace context still reaches the handlers.

// TracerProviderFromEnv returns the tracer provider the variables ask for, or nil for
// none. A setting seqctl cannot honour (another exporter, the gRPC protocol) is an error
// that names it.
func TracerProviderFromEnv(ctx context.Context, getenv func(string) string, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	endpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	switch {
	case strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true"), exporter == "none":
		return nil, nil
	case exporter == "" && endpoint == "":
		return nil, nil
	case exporter != "" && exporter != "otlp":
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: seqctl exports traces over OTLP/HTTP only; set it to otlp (or none), with OTEL_EXPORTER_OTLP_ENDPOINT", exporter)
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := getenv(v); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("%s=%s: seqctl exports traces over OTLP/HTTP with protobuf only; set it to http/protobuf (the collector's port 4318)", v, p)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "seqctl")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("the trace resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	if endpoint == "" {
		endpoint = "http://localhost:4318 (the default)"
	}
	log.Info("exporting traces over OTLP/HTTP", "endpoint", endpoint)
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// ShutdownTracing sends the spans still batched, within a few seconds.
func ShutdownTracing(tp *sdktrace.TracerProvider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("could not send the last spans", "err", err)
	}
}
