package cmdutil

import (
	"context"
	"log/slog"
	"strings"
	"testing"
)

// The standard OpenTelemetry variables decide whether seqctl run exports spans; a
// setting it cannot honour is an error that names the variable.
func TestTracingFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		export  bool
		wantErr string
	}{
		{name: "nothing set", env: nil},
		{name: "an endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, export: true},
		{name: "a traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, export: true},
		{name: "otlp to the default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, export: true},
		{name: "exporter none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}},
		{name: "SDK disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}},
		{name: "another exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: "OTEL_TRACES_EXPORTER=zipkin: seqctl exports traces over OTLP/HTTP only"},
		{name: "gRPC", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, wantErr: "OTEL_EXPORTER_OTLP_PROTOCOL=grpc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := TracerProviderFromEnv(context.Background(), func(k string) string { return tc.env[k] }, slog.New(slog.DiscardHandler))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tp != nil) != tc.export {
				t.Errorf("exporting %v, want %v", tp != nil, tc.export)
			}
			if tp != nil {
				_ = tp.Shutdown(context.Background())
			}
		})
	}
}
