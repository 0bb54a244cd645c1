package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/dstream"
	"github.com/streamhooks/webhooks/memstore"
)

// server is an http.Server on a loopback port that counts its connections.
type server struct {
	URL    string
	http   *http.Server
	served chan error
	// opened counts the connections accepted.
	opened atomic.Int64
}

// listen binds a loopback port. Serve starts serving on it.
func listen() (net.Listener, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	return ln, "http://" + ln.Addr().String(), nil
}

func serve(ln net.Listener, url string, h http.Handler, log *slog.Logger) *server {
	s := &server{URL: url, served: make(chan error, 1)}
	s.http = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.opened.Add(1)
			}
		},
	}
	go func() { s.served <- s.http.Serve(ln) }()
	return s
}

// close shuts the server down, forcibly once ctx ends.
func (s *server) close(ctx context.Context) error {
	err := s.http.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.http.Close())
	}
	if serr := <-s.served; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return err
}

// stack is the whole system under load: the example stream server with the
// engine mounted on a checked memstore, one webhook receiver per kind, and
// the HTTP client that appenders and consumers share.
type stack struct {
	cfg       Config
	v         *violations
	logs      *logCounter
	store     *checkedStore
	streams   *dstream.Server
	engine    *webhooks.Engine
	metrics   *sdkmetric.ManualReader
	meter     *sdkmetric.MeterProvider
	streamSrv *server
	receivers [numKinds]*server
	ep        *endpoints
	client    *http.Client
	// streamsOf lists the stream paths of each kind.
	streamsOf [numKinds][]string
}

// startStack starts every server and the engine, subscribes each kind and
// creates the streams, and returns once all are in place.
func startStack(ctx context.Context, cfg Config, v *violations) (_ *stack, err error) {
	s := &stack{
		cfg:  cfg,
		v:    v,
		logs: newLogCounter(cfg.Log),
		ep:   &endpoints{slowDelay: cfg.SlowDelay, acks: newAckLedger(), slowAttempts: make(map[string]int)},
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     30 * time.Second,
		}},
	}
	defer func() {
		if err != nil {
			_ = s.close(ctx)
		}
	}()
	log := slog.New(s.logs)
	s.streams = dstream.New(dstream.Options{Logger: log})
	ln, url, err := listen()
	if err != nil {
		return nil, err
	}
	s.store = newCheckedStore(memstore.New(), cfg.FailureGCAfter, cfg.MaxLag, v)
	s.metrics = sdkmetric.NewManualReader()
	s.meter = sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.metrics))
	s.engine, err = webhooks.New(s.store, s.streams,
		webhooks.WithCallbackBaseURL(url),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
		webhooks.WithTimeouts(cfg.WakingTimeout, cfg.LivenessTimeout, cfg.RequestTimeout),
		webhooks.WithBackoff(cfg.backoff),
		webhooks.WithFailureGCAfter(cfg.FailureGCAfter),
		webhooks.WithMaxConcurrentDeliveries(cfg.MaxConcurrentDeliveries),
		webhooks.WithLogger(log),
		webhooks.WithMeterProvider(s.meter),
	)
	if err == nil {
		err = s.engine.Start(ctx)
	}
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	s.streams.SetObserver(s.engine)
	s.streamSrv = serve(ln, url, s.engine.Handler(s.streams), log)

	counts := cfg.Mix.split(cfg.Consumers)
	for k := range numKinds {
		ln, hookURL, err := listen()
		if err != nil {
			return nil, err
		}
		secret, err := s.subscribe(ctx, k, hookURL+"/hook")
		if err == nil {
			var h http.Handler
			if h, err = s.ep.handler(k, secret, url, s.client); err == nil {
				s.receivers[k] = serve(ln, hookURL, h, log)
			}
		}
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("subscribing %s: %w", k, err)
		}
		for i := range counts[k] {
			s.streamsOf[k] = append(s.streamsOf[k], k.streamPath(i))
		}
	}
	return s, s.forEachStream(ctx, func(ctx context.Context, path string) error {
		return s.request(ctx, http.MethodPut, path, nil, http.StatusCreated)
	})
}

// subscribe creates kind k's subscription and returns its secret.
func (s *stack) subscribe(ctx context.Context, k kind, webhook string) (string, error) {
	// Unlimited: the soak measures the engine under load, not a limit.
	body, _ := json.Marshal(map[string]any{"webhook": webhook, "max_deliveries_per_minute": 0})
	req, err := http.NewRequestWithContext(ctx, http.MethodPut,
		s.streamSrv.URL+"/soak/"+k.String()+"/*?subscription="+k.subscriptionID(), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		Secret string `json:"webhook_secret"`
	}
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	return out.Secret, nil
}

// request makes one request to the stream server and checks its status.
func (s *stack) request(ctx context.Context, method, path string, body []byte, want int) error {
	req, err := http.NewRequestWithContext(ctx, method, s.streamSrv.URL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: status %s, want %d", method, path, resp.Status, want)
	}
	return nil
}

// forEachStream calls fn for every stream from cfg.Appenders goroutines
// and returns the first error.
func (s *stack) forEachStream(ctx context.Context, fn func(ctx context.Context, path string) error) error {
	paths := make(chan string)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range s.cfg.Appenders {
		wg.Go(func() {
			for p := range paths {
				if err := fn(ctx, p); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
				}
			}
		})
	}
feed:
	for k := range numKinds {
		for _, p := range s.streamsOf[k] {
			select {
			case paths <- p:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(paths)
	wg.Wait()
	return firstErr
}

// load appends to random streams at cfg.AppendRate for cfg.Load and
// returns how long each successful append took. It paces
// an open loop: appends the appenders cannot take in time are dropped and
// counted rather than queued, so a slow system sees the same offered load.
func (s *stack) load(ctx context.Context) (latencies []time.Duration, dropped int64) {
	var all []string
	for k := range numKinds {
		all = append(all, s.streamsOf[k]...)
	}
	jobs := make(chan string, s.cfg.Appenders*4)
	var (
		failed atomic.Int64
		wg     sync.WaitGroup
		mu     sync.Mutex
	)
	for range s.cfg.Appenders {
		wg.Go(func() {
			var took []time.Duration
			for p := range jobs {
				body := fmt.Appendf(nil, `{"event":%d}`, rand.Int64())
				start := time.Now()
				if err := s.request(ctx, http.MethodPost, p, body, http.StatusNoContent); err != nil {
					if ctx.Err() == nil && failed.Add(1) <= 3 {
						s.v.add("append to %s failed: %v", p, err)
					}
					continue
				}
				took = append(took, time.Since(start))
			}
			mu.Lock()
			latencies = append(latencies, took...)
			mu.Unlock()
		})
	}
	const tick = 20 * time.Millisecond
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	end := time.Now().Add(s.cfg.Load)
	budget := 0.0
	for now := time.Now(); now.Before(end) && ctx.Err() == nil; now = <-ticker.C {
		budget += s.cfg.AppendRate * tick.Seconds()
		for ; budget >= 1; budget-- {
			select {
			case jobs <- all[rand.IntN(len(all))]:
			default:
				dropped++
			}
		}
	}
	close(jobs)
	wg.Wait()
	if n := failed.Load(); n > 3 {
		s.v.add("%d appends failed in all", n)
	}
	return latencies, dropped
}

// engineCounts reads the engine's OpenTelemetry counters.
func (s *stack) engineCounts(ctx context.Context) (deliveries, callbacks map[string]int64, wakes int64, err error) {
	var rm metricdata.ResourceMetrics
	if err := s.metrics.Collect(ctx, &rm); err != nil {
		return nil, nil, 0, err
	}
	deliveries, callbacks = map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				switch m.Name {
				case "webhooks.wakes":
					wakes += dp.Value
				case "webhooks.delivery.attempts":
					outcome, _ := dp.Attributes.Value("outcome")
					deliveries[outcome.AsString()] += dp.Value
				case "webhooks.callbacks":
					code, _ := dp.Attributes.Value("code")
					callbacks[code.AsString()] += dp.Value
				}
			}
		}
	}
	return deliveries, callbacks, wakes, nil
}

// close stops the engine first, which ends deliveries in flight, then the
// stream server and the receivers, and drops the clients' idle
// connections.
func (s *stack) close(ctx context.Context) error {
	var err error
	if s.engine != nil {
		err = errors.Join(err, s.engine.Stop(ctx))
	}
	s.streams.Close()
	if s.streamSrv != nil {
		err = errors.Join(err, s.streamSrv.close(ctx))
	}
	for _, r := range s.receivers {
		if r != nil {
			err = errors.Join(err, r.close(ctx))
		}
	}
	s.client.CloseIdleConnections()
	if s.meter != nil {
		err = errors.Join(err, s.meter.Shutdown(ctx))
	}
	return err
}

// logCounter is a slog.Handler that collects warnings and errors, which a
// healthy run does not log, save failed deliveries to endpoints that fail
// on purpose; it passes records on to next if it is set.
type logCounter struct {
	next slog.Handler
	v    *violations
}

func newLogCounter(next *slog.Logger) *logCounter {
	h := &logCounter{v: &violations{}}
	if next != nil {
		h.next = next.Handler()
	}
	return h
}

func (h *logCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || (h.next != nil && h.next.Enabled(ctx, l))
}

func (h *logCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && !failingOnPurpose(r) {
		var attrs bytes.Buffer
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&attrs, " %s", a)
			return true
		})
		h.v.add("%s %s%s", r.Level, r.Message, attrs.String())
	}
	if h.next != nil && h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

// failingOnPurpose reports whether r is the engine's line about failed
// deliveries that the run provokes: any failure of a kind that always
// fails, and a timed-out attempt of a slow wake. Its first attempt always
// times out; a retry answers after a delay and then does a healthy
// consumer's work inside the request, which under load can outlast the
// request timeout too.
func failingOnPurpose(r slog.Record) bool {
	if r.Message != "webhooks: delivery attempt failed" && r.Message != "webhooks: delivery failures not logged" {
		return false
	}
	var sub, class string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "subscription_id":
			sub = a.Value.String()
		case "error_class":
			class = a.Value.String()
		}
		return true
	})
	for k := range numKinds {
		if sub != k.subscriptionID() {
			continue
		}
		slowTimeout := k == kindSlow && (class == "" || class == "timeout")
		return k.failing() || slowTimeout
	}
	return false
}

func (h *logCounter) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	if h.next != nil {
		c.next = h.next.WithAttrs(attrs)
	}
	return &c
}

func (h *logCounter) WithGroup(name string) slog.Handler {
	c := *h
	if h.next != nil {
		c.next = h.next.WithGroup(name)
	}
	return &c
}
