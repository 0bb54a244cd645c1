package webhooks

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/streamhooks/webhooks/internal/netguard"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Defaults, as the spec gives them where it gives them.
const (
	// DefaultWakingTimeout is how long a WAKING consumer has to answer a
	// webhook with 2xx or claim the wake before the delivery is retried.
	DefaultWakingTimeout = 10 * time.Second
	// DefaultLivenessTimeout is how long a LIVE consumer may go without a
	// callback before it returns to IDLE.
	DefaultLivenessTimeout = 45 * time.Second
	// DefaultRequestTimeout bounds one webhook POST.
	DefaultRequestTimeout = 30 * time.Second
	// DefaultTokenTTL is the lifetime of a callback token.
	DefaultTokenTTL = time.Hour
	// DefaultFailureGCAfter is how long deliveries to a consumer must fail
	// without a break before the consumer is removed.
	DefaultFailureGCAfter = 72 * time.Hour
	// DefaultMaxConcurrentDeliveries bounds webhook POSTs in flight; see
	// WithMaxConcurrentDeliveries.
	DefaultMaxConcurrentDeliveries = 512
	// DefaultPollInterval is the longest the scheduler goes without looking
	// at the Store's deadlines. A second is a tenth of the WAKING timeout,
	// so a deadline this engine was not told of is late by little against
	// the spec's timeouts, for two small Store queries a second when idle.
	DefaultPollInterval = time.Second
	// DefaultMaxDeliveriesPerHost bounds webhook POSTs in flight to one
	// webhook host.
	DefaultMaxDeliveriesPerHost = 128
)

// MinTokenKeyLength is the shortest accepted token signing key, in bytes.
const MinTokenKeyLength = 32

// Option configures an Engine. Pass options to New.
type Option func(*config) error

// WebhookPolicy decides which webhook URLs the engine accepts and dials.
// By default webhooks must be https and may reach only global unicast
// addresses, as the IANA special-purpose registries define them: never
// loopback, private, link-local, cloud metadata, documentation or
// translation (NAT64, 6to4, Teredo) ranges. The check is made again on
// every dial, after DNS, so DNS rebinding cannot bypass it. Redirects are
// never followed.
//
// The policy is checked when a subscription is created or changed, and
// at every POST: when the default transport dials it, on the host name
// and then on each address it resolves to; with a Proxy or a transport of
// WithHTTPTransport, which dial instead, on the URL before the POST is
// handed over, and the address check moves to them.
type WebhookPolicy struct {
	// AllowLoopback permits webhooks on loopback addresses, over plain http
	// as well as https. It is meant for development.
	AllowLoopback bool
	// AllowHosts, if not empty, are the only hosts webhooks may name, and
	// DenyHosts hosts they may not; a host in both is denied. Each entry
	// is a host name or IP address, or "*.example.com" for every name
	// under example.com (not example.com itself). Names compare without
	// case or a trailing dot. A subscription created before a host was
	// denied is refused at its next POST, as a failed delivery.
	AllowHosts, DenyHosts []string
	// Proxy, if set, is an HTTP egress proxy, such as smokescreen, that
	// every webhook POST goes through. The URL checks still apply, before
	// each POST; the check of the addresses a host name resolves to moves
	// to the proxy, which dials the webhook: the engine dials only the
	// proxy, wherever it is. Use a proxy that refuses internal addresses.
	Proxy *url.URL
}

// DialControl is a net.Dialer Control function that refuses, after DNS,
// the addresses p forbids. A transport given to WithHTTPTransport needs it
// on its dialer to keep that check.
func (p WebhookPolicy) DialControl(network, address string, c syscall.RawConn) error {
	return p.netguard().DialControl(network, address, c)
}

// netguard is the policy as package netguard enforces it.
func (p WebhookPolicy) netguard() netguard.Policy {
	return netguard.Policy{AllowLoopback: p.AllowLoopback, AllowHosts: p.AllowHosts, DenyHosts: p.DenyHosts, Proxy: p.Proxy}
}

// validate refuses a malformed host entry or proxy URL.
func (p WebhookPolicy) validate() error {
	for _, h := range slices.Concat(p.AllowHosts, p.DenyHosts) {
		if err := netguard.CheckHostPattern(h); err != nil {
			return fmt.Errorf("WithWebhookPolicy: %w", err)
		}
	}
	if p.Proxy != nil && ((p.Proxy.Scheme != "http" && p.Proxy.Scheme != "https") || p.Proxy.Host == "") {
		return fmt.Errorf("WithWebhookPolicy: proxy %q is not an http(s) URL with a host", p.Proxy.Redacted())
	}
	return nil
}

type config struct {
	clock                   clock.Clock
	logger                  *slog.Logger
	tracerProvider          trace.TracerProvider
	meterProvider           metric.MeterProvider
	transport               http.RoundTripper
	callbackBase            *url.URL
	tokenKey                []byte
	wakingTimeout           time.Duration
	livenessTimeout         time.Duration
	requestTimeout          time.Duration
	tokenTTL                time.Duration
	failureGCAfter          time.Duration
	backoff                 func(retry int) time.Duration
	webhookPolicy           WebhookPolicy
	maxConcurrentDeliveries int
	authorizer              Authorizer
	tenancy                 *Tenancy
	pollInterval            time.Duration
	sweepInterval           time.Duration // zero: sweepPolls poll intervals
	maxDeliveriesPerHost    int
	breaker                 breakerConfig
	disabledHook            func(context.Context, SubscriptionDisabled)
	deliveryLogKeep         int
	maxRetryAfter           time.Duration
	handlers                map[string]BatchHandler
	subscriptionMetrics     int
	propagator              propagation.TextMapPropagator
	// streamRoot is the path under which the host serves streams, without
	// a trailing '/': "" for the origin's root.
	streamRoot string
}

// breakerConfig is when the circuit breaker disables a subscription; a
// zero field never trips it.
type breakerConfig struct {
	failures   int
	failingFor time.Duration
}

func defaultConfig() config {
	return config{
		clock:                   clock.New(),
		logger:                  slog.Default(),
		tracerProvider:          otel.GetTracerProvider(),
		meterProvider:           otel.GetMeterProvider(),
		propagator:              globalPropagator{},
		wakingTimeout:           DefaultWakingTimeout,
		livenessTimeout:         DefaultLivenessTimeout,
		requestTimeout:          DefaultRequestTimeout,
		tokenTTL:                DefaultTokenTTL,
		failureGCAfter:          DefaultFailureGCAfter,
		backoff:                 DefaultBackoff,
		maxConcurrentDeliveries: DefaultMaxConcurrentDeliveries,
		pollInterval:            DefaultPollInterval,
		maxDeliveriesPerHost:    DefaultMaxDeliveriesPerHost,
		breaker:                 breakerConfig{DefaultBreakerFailures, DefaultBreakerFailingFor},
		deliveryLogKeep:         DefaultDeliveryLogKeep,
		maxRetryAfter:           DefaultMaxRetryAfter,
	}
}

// WithCallbackBaseURL sets the public base URL under which the host serves
// the callback API: a consumer's callback URL is base + "/callback/" + its
// ID. It is required.
func WithCallbackBaseURL(base string) Option {
	return func(c *config) error {
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("WithCallbackBaseURL: %q is not an absolute http(s) URL", base)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("WithCallbackBaseURL: %q must not have a query or fragment", base)
		}
		u.Path = trimTrailingSlash(u.Path)
		u.RawPath = ""
		c.callbackBase = u
		return nil
	}
}

// WithStreamRoot sets the path under which the host serves its streams,
// such as "/v1/stream": the reserved `__ds` API of the Durable Streams
// protocol is served at "{root}/__ds/", and the stream paths in its bodies
// are relative to root. Its public URLs (callback_url, jwks_url) are the
// callback base URL's scheme and host, then root. The default, "", is the
// origin's root.
func WithStreamRoot(root string) Option {
	return func(c *config) error {
		root = trimTrailingSlash(root)
		if root != "" && (!strings.HasPrefix(root, "/") || strings.Contains(root, "/"+dsReservedSegment+"/") || strings.HasSuffix(root, "/"+dsReservedSegment)) {
			return fmt.Errorf("WithStreamRoot: %q must be a path starting with '/', outside %s", root, dsReservedSegment)
		}
		if err := ValidateStreamPath(root + "/x"); root != "" && err != nil {
			return fmt.Errorf("WithStreamRoot: %w", err)
		}
		c.streamRoot = root
		return nil
	}
}

// WithClock sets the clock every timer and timestamp comes from.
func WithClock(clk clock.Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return fmt.Errorf("WithClock: clock is nil")
		}
		c.clock = clk
		return nil
	}
}

// WithLogger sets the logger. The default is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("WithLogger: logger is nil")
		}
		c.logger = l
		return nil
	}
}

// WithTracerProvider sets the OpenTelemetry tracer provider. The default is
// the global one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return fmt.Errorf("WithTracerProvider: provider is nil")
		}
		c.tracerProvider = tp
		return nil
	}
}

// WithMeterProvider sets the OpenTelemetry meter provider. The default is
// the global one. Of engines sharing a Store, each counts what it did, and
// the one that holds the Store's lease (see Leaser) reports the gauge
// webhooks.consumers, which counts the whole Store.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return fmt.Errorf("WithMeterProvider: provider is nil")
		}
		c.meterProvider = mp
		return nil
	}
}

// WithHTTPTransport sets the transport webhook POSTs go through. The
// engine still checks every POST's URL against the WebhookPolicy (scheme,
// host lists, IP literals), applies the request timeout and never follows
// redirects.
//
// BEWARE: the default transport also checks, on every dial, the addresses
// a host name resolves to, which stops a name that resolves (or rebinds)
// to an internal address. The engine cannot reach into another
// transport's dialer: rt loses that check unless its net.Dialer's Control
// is WebhookPolicy.DialControl, or it dials through a proxy that checks.
func WithHTTPTransport(rt http.RoundTripper) Option {
	return func(c *config) error {
		if rt == nil {
			return fmt.Errorf("WithHTTPTransport: transport is nil")
		}
		c.transport = rt
		return nil
	}
}

// WithTokenKey sets the HMAC key that signs callback tokens. Engines that
// share a Store must share the key. Without this option the engine uses the
// key kept in the Store, creating one on first use.
func WithTokenKey(key []byte) Option {
	return func(c *config) error {
		if len(key) < MinTokenKeyLength {
			return fmt.Errorf("WithTokenKey: key has %d bytes, want at least %d", len(key), MinTokenKeyLength)
		}
		c.tokenKey = append([]byte(nil), key...)
		return nil
	}
}

// WithTimeouts sets the WAKING, liveness and webhook request timeouts. A
// zero value keeps the default.
func WithTimeouts(waking, liveness, request time.Duration) Option {
	return func(c *config) error {
		for _, d := range []struct {
			name  string
			value time.Duration
			dst   *time.Duration
		}{
			{"waking", waking, &c.wakingTimeout},
			{"liveness", liveness, &c.livenessTimeout},
			{"request", request, &c.requestTimeout},
		} {
			if d.value < 0 {
				return fmt.Errorf("WithTimeouts: %s timeout %v is negative", d.name, d.value)
			}
			if d.value > 0 {
				*d.dst = d.value
			}
		}
		return nil
	}
}

// WithTokenTTL sets how long a callback token is valid. A token is renewed
// in callback responses once a quarter of its TTL remains.
func WithTokenTTL(ttl time.Duration) Option {
	return func(c *config) error {
		if ttl < time.Minute {
			return fmt.Errorf("WithTokenTTL: %v is shorter than a minute", ttl)
		}
		c.tokenTTL = ttl
		return nil
	}
}

// WithFailureGCAfter sets how long deliveries to a wake consumer must fail
// without a break before it becomes a dead letter (StateFailed), for
// subscriptions whose retry policy sets no other limit.
func WithFailureGCAfter(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithFailureGCAfter: %v is not positive", d)
		}
		c.failureGCAfter = d
		return nil
	}
}

// WithBackoff sets the wait before delivery retry number retry (1 for the
// first retry). The default is DefaultBackoff.
func WithBackoff(backoff func(retry int) time.Duration) Option {
	return func(c *config) error {
		if backoff == nil {
			return fmt.Errorf("WithBackoff: function is nil")
		}
		c.backoff = backoff
		return nil
	}
}

// WithWebhookPolicy sets which webhook URLs are accepted and dialed.
func WithWebhookPolicy(p WebhookPolicy) Option {
	return func(c *config) error {
		if err := p.validate(); err != nil {
			return err
		}
		c.webhookPolicy = p
		return nil
	}
}

// WithMaxConcurrentDeliveries bounds the webhook POSTs in flight at once,
// with one exception: a webhook host whose last POST succeeded and that has
// none in flight may always start one, up to twice n in all, so that hosts
// that hang cannot hold up healthy ones. Attempts beyond the bound wait in
// their host's queue, never in the scheduler, and each host's waiting
// attempts are served in turn.
func WithMaxConcurrentDeliveries(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("WithMaxConcurrentDeliveries: %d is less than 1", n)
		}
		c.maxConcurrentDeliveries = n
		return nil
	}
}

// WithPollInterval sets the longest the scheduler waits before it looks at
// the Store's deadlines again, even when it knows of none sooner. Deadlines
// this engine sets wake its scheduler at once; the poll finds the others,
// such as those left in a durable Store by an engine that stopped. The
// default is DefaultPollInterval.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithPollInterval: %v is not positive", d)
		}
		c.pollInterval = d
		return nil
	}
}

// WithSweepInterval sets how often the engine sweeps the streams its
// subscriptions match for appends it was not told of, because the host
// that committed them crashed before its StreamAppended, or the call
// failed and its engine died before retrying it. Each sweep lists the
// streams (StreamSource.MatchStreams) and wakes the consumers of those
// whose tail moved since the previous one, so such an append waits at most
// about an interval, on any engine still running. The default is 60 poll
// intervals (WithPollInterval): a minute.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("WithSweepInterval: %v is not positive", d)
		}
		c.sweepInterval = d
		return nil
	}
}

// WithMaxDeliveriesPerHost bounds the webhook POSTs in flight to one host
// (host and port). While more than half the WithMaxConcurrentDeliveries
// bound is in flight, each host is also held to an adaptive limit: it
// starts at a few, gains one per 2xx up to n, and halves, down to one, on
// a timeout or connection failure of a POST started since it was last
// cut, so a burst of failures cuts it once. A waiting
// attempt whose WAKING timeout passes is retried on the backoff schedule
// instead.
func WithMaxDeliveriesPerHost(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("WithMaxDeliveriesPerHost: %d is less than 1", n)
		}
		c.maxDeliveriesPerHost = n
		return nil
	}
}

// DefaultBackoff is the spec's retry schedule: retries 1 to 10 wait
// min(2^n × 100ms, 30s) plus up to 1s of jitter; later retries wait 60s plus
// up to 5s of jitter.
func DefaultBackoff(retry int) time.Duration {
	if retry < 1 {
		retry = 1
	}
	if retry > 10 {
		return 60*time.Second + rand.N(5*time.Second)
	}
	wait := min(time.Duration(1<<retry)*100*time.Millisecond, 30*time.Second)
	return wait + rand.N(time.Second)
}

func trimTrailingSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// WithCircuitBreaker sets when the engine disables a subscription whose
// webhook keeps failing: after failures delivery attempts failed in a row,
// across its consumers and the engines sharing the Store, or once they
// have failed for failingFor without a success, whichever comes first.
// Zero turns either off. The defaults are DefaultBreakerFailures and
// DefaultBreakerFailingFor. A disabled subscription keeps its cursors;
// see WithSubscriptionDisabledHook.
func WithCircuitBreaker(failures int, failingFor time.Duration) Option {
	return func(c *config) error {
		if failures < 0 || failingFor < 0 {
			return fmt.Errorf("WithCircuitBreaker: %d failures or %v is negative", failures, failingFor)
		}
		c.breaker = breakerConfig{failures, failingFor}
		return nil
	}
}

// WithSubscriptionDisabledHook sets a function the engine calls when it
// disables a subscription, so that the host can tell its admins. Of the
// engines sharing a Store, the one that disabled it calls its hook, once.
// It runs on a delivery goroutine: it should return quickly.
func WithSubscriptionDisabledHook(hook func(ctx context.Context, ev SubscriptionDisabled)) Option {
	return func(c *config) error {
		c.disabledHook = hook
		return nil
	}
}

// WithDeliveryLog sets how many of each consumer's latest delivery
// attempts the Store keeps, if it is a DeliveryLog; zero keeps none. The
// default is DefaultDeliveryLogKeep.
func WithDeliveryLog(keep int) Option {
	return func(c *config) error {
		if keep < 0 {
			return fmt.Errorf("WithDeliveryLog: %d is negative", keep)
		}
		c.deliveryLogKeep = keep
		return nil
	}
}

// WithMaxRetryAfter caps the wait before a retry that a webhook's 429 or
// 503 response can ask for with Retry-After. The default is
// DefaultMaxRetryAfter.
func WithMaxRetryAfter(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("WithMaxRetryAfter: %v is negative", d)
		}
		c.maxRetryAfter = d
		return nil
	}
}

// WithSubscriptionMetrics labels the delivery metrics (attempts, their
// duration, retries and batch sizes) with a subscription_id attribute for
// the first max subscriptions that deliver, and with OtherSubscriptions
// for the rest, so that the number of series stays bounded. Without it
// the metrics carry no subscription. max must be positive.
func WithSubscriptionMetrics(max int) Option {
	return func(c *config) error {
		if max <= 0 {
			return fmt.Errorf("WithSubscriptionMetrics: max %d is not positive", max)
		}
		c.subscriptionMetrics = max
		return nil
	}
}

// WithPropagator sets the propagator that injects the trace context of the
// span sending each webhook POST into its headers (W3C traceparent and
// tracestate with propagation.TraceContext), so that a receiver can join
// the trace. The default is the global propagator
// (otel.GetTextMapPropagator) as it is at each POST, which sends nothing
// until the host sets one; nil sends no trace context.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) error {
		c.propagator = p
		return nil
	}
}

// globalPropagator is the global propagator at each use, so that a host
// may set it after New.
type globalPropagator struct{}

func (globalPropagator) Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	otel.GetTextMapPropagator().Inject(ctx, carrier)
}

func (globalPropagator) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, carrier)
}

func (globalPropagator) Fields() []string { return otel.GetTextMapPropagator().Fields() }
