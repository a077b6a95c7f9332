// Package tracing exports keygate's OpenTelemetry spans over OTLP (gRPC or
// HTTP) with the OpenTelemetry Go SDK, and provides the listeners' tracing
// handler: it continues an incoming W3C traceparent, starts the request's
// server span and hands its context to the handler inside, so that the
// gateway's stage spans are its children and the TraceId of every error
// body is the span's trace id.
package tracing

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/keygate/keygate/internal/fieldpath"
)

// Protocols of Config.Protocol.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
)

// Config is the tracing section. The zero value exports nothing; start
// from DefaultConfig.
type Config struct {
	// Enabled turns span export on. Off, the request path starts no span
	// and costs nothing.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the OTLP receiver's URL: http://host:4317 (grpc) or
	// http://host:4318 (http; the path /v1/traces is added when the URL
	// has none). https:// verifies the receiver against the system roots;
	// http:// sends in clear.
	Endpoint string `yaml:"endpoint"`
	// Protocol is grpc (default) or http (protobuf over HTTP).
	Protocol string `yaml:"protocol"`
	// SampleRatio is the share of new traces recorded, 0 to 1 (default
	// 1; 0 records only traces the caller sampled). A request whose incoming traceparent is sampled is always
	// recorded, one that is not never is (parent-based sampling). An
	// unrecorded request keeps its trace id in TraceId and X-Trace-Id.
	SampleRatio float64 `yaml:"sample_ratio"`
	// Headers are sent with every export (e.g. a tenant header). Put
	// secrets in HeadersEnv, never here.
	Headers map[string]string `yaml:"headers"`
	// HeadersEnv names, per header, the environment variable that holds
	// its value (an ingest token).
	HeadersEnv map[string]string `yaml:"headers_env"`
	// ServiceName is the resource's service.name; default keygate.
	ServiceName string `yaml:"service_name"`
	// Timeout bounds one export; default 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultConfig is tracing off, and once enabled: gRPC, every new trace
// recorded, service name keygate, 10 s per export.
func DefaultConfig() Config {
	return Config{Protocol: ProtocolGRPC, SampleRatio: 1, ServiceName: "keygate", Timeout: 10 * time.Second}
}

// Validate checks the section; errors name the field by its YAML key.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	switch c.Protocol {
	case "", ProtocolGRPC, ProtocolHTTP:
	default:
		return fieldpath.Errorf("protocol", "%q is not grpc or http", c.Protocol)
	}
	u, err := url.Parse(c.Endpoint)
	if c.Endpoint == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldpath.Errorf("endpoint", "%q must be an http:// or https:// URL of an OTLP receiver", c.Endpoint)
	}
	if u.User != nil {
		return fieldpath.Errorf("endpoint", "must not carry credentials; use headers_env")
	}
	if r := c.SampleRatio; r < 0 || r > 1 || r != r {
		return fieldpath.Errorf("sample_ratio", "%v must be between 0 and 1", r)
	}
	if c.Timeout < 0 {
		return fieldpath.Errorf("timeout", "must not be negative")
	}
	for h, env := range c.HeadersEnv {
		if env == "" {
			return fieldpath.Errorf("headers_env."+h, "names no environment variable")
		}
	}
	return nil
}

// Deps are what New needs besides the configuration.
type Deps struct {
	// Getenv reads HeadersEnv; nil reads nothing.
	Getenv func(string) string
	// Version is the resource's service.version.
	Version string
	// Exporter, when set, receives the spans instead of the OTLP
	// endpoint (benchmarks).
	Exporter sdktrace.SpanExporter
}

// Provider exports spans. A nil *Provider (tracing off) is valid: its
// Tracer is nil and its Handler returns the handler it wraps. It is safe
// for concurrent use.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer oteltrace.Tracer
}

// New builds the exporter and the tracer provider; nil when tracing is
// off. Spans are batched and exported in the background; Shutdown
// flushes them.
func New(ctx context.Context, cfg Config, deps Deps) (*Provider, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	headers := map[string]string{}
	for k, v := range cfg.Headers {
		headers[k] = v
	}
	for k, env := range cfg.HeadersEnv {
		v := ""
		if deps.Getenv != nil {
			v = deps.Getenv(env)
		}
		if v == "" {
			return nil, fieldpath.Errorf("headers_env."+k, "the environment variable %s is empty", env)
		}
		headers[k] = v
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	exp := deps.Exporter
	var err error
	switch {
	case exp != nil:
	case cfg.Protocol == ProtocolHTTP:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(httpURL(cfg.Endpoint)),
			otlptracehttp.WithHeaders(headers), otlptracehttp.WithTimeout(timeout))
	default:
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(cfg.Endpoint),
			otlptracegrpc.WithHeaders(headers), otlptracegrpc.WithTimeout(timeout))
	}
	if err != nil {
		return nil, fieldpath.Errorf("endpoint", "%w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "keygate"
	}
	res := resource.NewSchemaless(attribute.String("service.name", name), attribute.String("service.version", deps.Version))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	return &Provider{tp: tp, tracer: tp.Tracer("github.com/keygate/keygate")}, nil
}

// httpURL adds OTLP/HTTP's /v1/traces to an endpoint without a path.
func httpURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err == nil && (u.Path == "" || u.Path == "/") {
		u.Path = "/v1/traces"
		return u.String()
	}
	return endpoint
}

// Tracer is the tracer of keygate's spans; nil when p is nil.
func (p *Provider) Tracer() oteltrace.Tracer {
	if p == nil {
		return nil
	}
	return p.tracer
}

// Shutdown exports the spans still buffered, within ctx, and stops.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// ForceFlush exports the spans buffered so far.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}

// Handler wraps next, the handler of the listener named listener, in a
// server span per request. An incoming traceparent is continued; the
// request next sees carries the server span in its context and the span's
// traceparent in its header, which is where keygate takes the trace id of
// its error bodies and X-Trace-Id from. The span records the method (known
// methods only), the listener and the status, never the path or a header:
// a credential pasted into the URL must not reach the trace backend. With
// p nil, next is returned as it is.
func (p *Provider) Handler(listener string, next http.Handler) http.Handler {
	if p == nil {
		return next
	}
	tr := p.tracer
	prop := propagation.TraceContext{}
	lis := attribute.String("keygate.listener", listener)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		method := knownMethod(r.Method)
		ctx, sp := tr.Start(ctx, method, oteltrace.WithSpanKind(oteltrace.SpanKindServer),
			oteltrace.WithAttributes(lis, attribute.String("http.request.method", method)))
		defer sp.End()
		delete(r.Header, "Traceparent")
		delete(r.Header, "Tracestate")
		prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
		sw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(ctx)
		next.ServeHTTP(sw, r)
		if sw.status != 0 {
			sp.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		}
		if r.Pattern != "" { // the admin API's and the portal's mux routes
			sp.SetAttributes(attribute.String("http.route", r.Pattern))
		}
	})
}

// knownMethod is m when it is a standard method, else "_OTHER" (a key
// pasted into the method position is a credential too).
func knownMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// statusWriter remembers the final status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
