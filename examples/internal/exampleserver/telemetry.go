package exampleserver

import (
	"context"
	"errors"
	"net/http"
	"os"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// MetricsPath serves the engine's metrics in the Prometheus text format.
const MetricsPath = "/metrics"

// telemetry is the server's OpenTelemetry: metrics for /metrics and, when
// the standard OTEL_* variables ask for it, OTLP export of metrics and
// traces.
type telemetry struct {
	meters  *sdkmetric.MeterProvider
	tracers *sdktrace.TracerProvider
	// scrape serves MetricsPath.
	scrape http.Handler
}

// otlpAsked reports whether the environment asks for an exporter of
// signal ("METRICS" or "TRACES"): autoexport would otherwise fall back to
// OTLP on localhost, and a server nobody configured should send nothing.
func otlpAsked(signal string) bool {
	for _, v := range []string{"OTEL_" + signal + "_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"} {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// newTelemetry sets up the server's meter provider with a Prometheus
// reader on a registry of its own, so that servers in one process (tests)
// do not collide, and the OTLP exporters the environment asks for. The
// tracer provider and the W3C propagator are set only with an exporter:
// without one, spans would go nowhere.
func newTelemetry(ctx context.Context) (*telemetry, error) {
	reg := promclient.NewRegistry()
	prom, err := prometheus.New(prometheus.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	readers := []sdkmetric.Option{sdkmetric.WithReader(prom)}
	if otlpAsked("METRICS") {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, err
		}
		readers = append(readers, sdkmetric.WithReader(r))
	}
	t := &telemetry{
		meters: sdkmetric.NewMeterProvider(readers...),
		scrape: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}
	if otlpAsked("TRACES") {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, errors.Join(err, t.meters.Shutdown(ctx))
		}
		t.tracers = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	}
	return t, nil
}

// close flushes and stops the exporters.
func (t *telemetry) close(ctx context.Context) error {
	err := t.meters.Shutdown(ctx)
	if t.tracers != nil {
		err = errors.Join(err, t.tracers.Shutdown(ctx))
	}
	return err
}
