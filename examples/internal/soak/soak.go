// Package soak load-tests the whole webhook stack on loopback: the example
// stream server with the engine on a memstore, thousands of consumers and
// their webhook endpoints, some healthy, some slow and some failing. It
// appends events for a while, waits for the system to settle, checks that
// nothing was lost and no consumer is stuck, and measures goroutines, heap
// and connections before, during and after.
//
// Run drives one soak. TestSoak runs a CI-sized one; examples/soak runs
// bigger ones and prints the figures.
package soak

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// Mix weighs the kinds of webhook endpoint. Healthy endpoints claim, ack
// and finish each wake; one in four answers {"done":true} instead. Slow
// endpoints outlive the request timeout on the first attempt of every wake
// and succeed, after SlowDelay, on the retry. Failing endpoints answer 503,
// reset the connection or hang, in equal parts, until the engine collects
// their consumers.
type Mix struct {
	Healthy, Slow, Failing int
}

// ParseMix parses "healthy,slow,failing" weights, e.g. "60,20,20".
func ParseMix(s string) (Mix, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return Mix{}, fmt.Errorf("mix %q: want three weights, healthy,slow,failing", s)
	}
	var w [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return Mix{}, fmt.Errorf("mix %q: %q is not a non-negative integer", s, p)
		}
		w[i] = n
	}
	m := Mix{Healthy: w[0], Slow: w[1], Failing: w[2]}
	if m.Healthy+m.Slow+m.Failing == 0 {
		return Mix{}, fmt.Errorf("mix %q: the weights add up to zero", s)
	}
	return m, nil
}

func (m Mix) String() string { return fmt.Sprintf("%d,%d,%d", m.Healthy, m.Slow, m.Failing) }

// split divides n consumers among the kinds.
func (m Mix) split(n int) [numKinds]int {
	total := m.Healthy + m.Slow + m.Failing
	slow := n * m.Slow / total
	failing := n * m.Failing / total
	healthy := n - slow - failing
	var out [numKinds]int
	out[kindDone] = healthy / 4
	out[kindHealthy] = healthy - out[kindDone]
	out[kindSlow] = slow
	for i := range failing {
		out[kindFail5xx+kind(i%3)]++
	}
	return out
}

// Config configures a soak. DefaultConfig is the CI size.
type Config struct {
	// Consumers is how many consumers, each with its own stream.
	Consumers int
	// Mix weighs the kinds of endpoint.
	Mix Mix
	// Load is how long events are appended.
	Load time.Duration
	// AppendRate is the appends per second offered, to random streams.
	AppendRate float64
	// Appenders is how many goroutines append, and create streams.
	Appenders int
	// Drain bounds the wait, after the load, for every working consumer to
	// ack all its events and every failing one to be collected.
	Drain time.Duration

	// The engine's timeouts and failure GC.
	WakingTimeout, LivenessTimeout, RequestTimeout, FailureGCAfter time.Duration
	// BackoffBase and BackoffMax shape the retry backoff: retry n waits
	// min(BackoffBase·2^(n-1), BackoffMax) plus up to BackoffBase of jitter.
	BackoffBase, BackoffMax time.Duration
	// MaxConcurrentDeliveries bounds the engine's webhook POSTs in flight.
	MaxConcurrentDeliveries int
	// SlowDelay is how long a slow endpoint takes before it handles a
	// retried delivery.
	SlowDelay time.Duration

	// SampleEvery is the period of resource samples and stuck-consumer
	// scans during load and drain.
	SampleEvery time.Duration
	// MaxLag is how far past its deadline a consumer may be before it
	// counts as stuck, and how late failure GC may come: the engine falls
	// behind under load, but must not fall behind without bound.
	MaxLag time.Duration
	// SettleWithin bounds the wait, after shutdown, for resources to return
	// to the baseline.
	SettleWithin time.Duration
	// GoroutineSlack and HeapSlack are how far above the baseline
	// goroutines and live heap may stay after shutdown. The heap may also
	// keep goroutineHeapBytes per goroutine at the peak: the runtime keeps
	// the descriptors of exited goroutines for reuse. Connections and file
	// descriptors must return to the baseline exactly.
	GoroutineSlack int
	HeapSlack      uint64

	// Log, if set, receives the stack's logs; warnings and errors are
	// violations either way.
	Log *slog.Logger
	// Progress, if set, is called with a line at each phase.
	Progress func(string)
}

// DefaultConfig returns the CI-sized soak: 2,000 consumers for about 30
// seconds under the race detector on two cores.
func DefaultConfig() Config {
	return Config{
		Consumers:       2000,
		Mix:             Mix{Healthy: 60, Slow: 20, Failing: 20},
		Load:            15 * time.Second,
		AppendRate:      300,
		Appenders:       16,
		Drain:           30 * time.Second,
		WakingTimeout:   3 * time.Second,
		LivenessTimeout: 4 * time.Second,
		RequestTimeout:  2 * time.Second,
		// Long enough for a slow endpoint, whose first attempts always time
		// out, to get its retries through while the engine holds its host to
		// a small limit for those timeouts.
		FailureGCAfter:          12 * time.Second,
		BackoffBase:             100 * time.Millisecond,
		BackoffMax:              time.Second,
		MaxConcurrentDeliveries: webhooks.DefaultMaxConcurrentDeliveries,
		SlowDelay:               300 * time.Millisecond,
		SampleEvery:             time.Second,
		MaxLag:                  5 * time.Second,
		SettleWithin:            15 * time.Second,
		GoroutineSlack:          0,
		HeapSlack:               4 << 20,
	}
}

func (c Config) validate() error {
	switch {
	case c.Consumers < 1:
		return errors.New("soak: Consumers must be at least 1")
	case c.Appenders < 1:
		return errors.New("soak: Appenders must be at least 1")
	case c.AppendRate <= 0:
		return errors.New("soak: AppendRate must be positive")
	case c.SampleEvery <= 0:
		return errors.New("soak: SampleEvery must be positive")
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return errors.New("soak: want 0 < BackoffBase <= BackoffMax")
	case c.SlowDelay >= c.RequestTimeout:
		return errors.New("soak: SlowDelay must be under RequestTimeout, or slow endpoints never succeed")
	}
	_, err := ParseMix(c.Mix.String())
	return err
}

func (c Config) backoff(retry int) time.Duration {
	d := c.BackoffMax
	if retry < 31 {
		d = min(c.BackoffBase<<max(retry-1, 0), c.BackoffMax)
	}
	return d + rand.N(c.BackoffBase)
}

// Report is what a soak measured and found.
type Report struct {
	Config Config
	// Kinds is how many consumers each kind of endpoint has.
	Kinds map[string]int
	// Before is measured before the stack starts, Peak is the highest of
	// each figure while it runs, and After is the first sample after
	// shutdown that is back within the tolerance, or the last one taken.
	Before, Peak, After Sample
	// Settled reports whether After is within the tolerance of Before.
	Settled bool

	Appends, Dropped int64 // appends made, and offered but dropped
	// AppendLatency is the p50, p99 and maximum time an append took,
	// including the engine's StreamAppended, which runs inside it.
	AppendLatency [3]time.Duration
	Wakes         int64 // wake cycles the engine began
	// Deliveries counts webhook attempts by outcome, Callbacks callbacks
	// by response code, both from the engine's metrics.
	Deliveries, Callbacks map[string]int64
	// Requests counts webhook requests each kind of endpoint received.
	Requests map[string]int64
	// AgentFailures counts wakes a consumer abandoned, by kind.
	AgentFailures map[string]int64
	// Acks counts ack callbacks answered 200.
	Acks int
	// Collected counts consumers removed by failure GC, by kind.
	Collected map[string]int
	// ConnsToReceivers and ConnsToStreamServer count the connections the
	// servers accepted.
	ConnsToReceivers, ConnsToStreamServer int64
	// MaxOverdue is the furthest past its deadline any WAKING or LIVE
	// consumer was seen.
	MaxOverdue time.Duration

	Setup, Loaded, Drained, Teardown time.Duration
	// LoadAverage is the machine's one-minute load average when the load
	// began and when it ended, from /proc/loadavg: figures taken on a busy
	// machine are worse.
	LoadAverage [2]string

	// Violations lists every invariant the run broke; empty means it
	// passed.
	Violations []string
	// Goroutines holds the goroutines' stacks, grouped, if shutdown timed
	// out or resources did not settle.
	Goroutines string
}

// OK reports whether the soak broke no invariant and settled.
func (r *Report) OK() bool { return len(r.Violations) == 0 && r.Settled }

// Run runs one soak. It returns an error only if the stack cannot start;
// broken invariants are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := warmUp(ctx); err != nil {
		return nil, fmt.Errorf("soak: warm-up: %w", err)
	}
	rep := &Report{Config: cfg, Kinds: map[string]int{}}
	for k, n := range cfg.Mix.split(cfg.Consumers) {
		rep.Kinds[kind(k).String()] = n
	}
	rep.Before = takeSettledSample()
	v := &violations{}
	if err := runStack(ctx, cfg, rep, v); err != nil {
		return nil, err
	}
	cfg.progress("shut down; waiting for resources to return to the baseline")
	rep.After, rep.Settled = settle(ctx, cfg, rep.Before, rep.Peak)
	if !rep.Settled {
		v.add("resources did not return to the baseline within %v: before %+v, after %+v",
			cfg.SettleWithin, rep.Before, rep.After)
		if rep.Goroutines == "" {
			rep.Goroutines = goroutineDump()
		}
	}
	rep.Violations = v.list()
	return rep, nil
}

func (c Config) progress(format string, args ...any) {
	if c.Progress != nil {
		c.Progress(fmt.Sprintf(format, args...))
	}
}

// runStack runs the load on a stack of its own, so that nothing of it is
// reachable when Run measures the heap afterwards.
func runStack(ctx context.Context, cfg Config, rep *Report, v *violations) error {
	start := time.Now()
	cfg.progress("starting %d consumers", cfg.Consumers)
	s, err := startStack(ctx, cfg, v)
	if err != nil {
		return fmt.Errorf("soak: starting: %w", err)
	}
	rep.Setup = time.Since(start)

	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		s.sample(ctx, rep, stopSampling)
	}()

	cfg.progress("appending at %.0f/s for %v", cfg.AppendRate, cfg.Load)
	start = time.Now()
	rep.LoadAverage[0] = loadAverage()
	latencies, dropped := s.load(ctx)
	rep.LoadAverage[1] = loadAverage()
	rep.Appends, rep.Dropped = int64(len(latencies)), dropped
	rep.AppendLatency = percentiles(latencies)
	rep.Loaded = time.Since(start)

	cfg.progress("draining: waiting up to %v for every consumer to settle", cfg.Drain)
	start = time.Now()
	s.drain(ctx)
	rep.Drained = time.Since(start)
	close(stopSampling)
	<-sampled

	s.finalChecks(ctx)
	var cerr error
	rep.Deliveries, rep.Callbacks, rep.Wakes, cerr = s.engineCounts(ctx)
	if cerr != nil {
		v.add("collecting engine metrics: %v", cerr)
	}
	rep.Requests, rep.AgentFailures = map[string]int64{}, map[string]int64{}
	for k := range numKinds {
		rep.Requests[k.String()] = s.ep.requests[k].Load()
		if n := s.ep.agentFailures[k].Load(); n > 0 {
			rep.AgentFailures[k.String()] = n
		}
		rep.ConnsToReceivers += s.receivers[k].opened.Load()
	}
	rep.ConnsToStreamServer = s.streamSrv.opened.Load()
	rep.Acks = s.ep.acks.total()
	rep.Collected = map[string]int{}
	for k, n := range s.store.collected() {
		rep.Collected[k.String()] = n
	}

	start = time.Now()
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.close(closeCtx); err != nil {
		v.add("shutting down: %v", err)
		rep.Goroutines = goroutineDump()
	}
	rep.Teardown = time.Since(start)
	for _, msg := range s.logs.v.list() {
		v.add("logged: %s", msg)
	}
	return nil
}

// sample measures resources and scans for stuck consumers every
// SampleEvery until stop is closed.
func (s *stack) sample(ctx context.Context, rep *Report, stop <-chan struct{}) {
	t := time.NewTicker(s.cfg.SampleEvery)
	defer t.Stop()
	rep.Peak = rep.Before
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		rep.Peak = rep.Peak.max(takeSample())
		rep.MaxOverdue = max(rep.MaxOverdue, s.scanOverdue(ctx))
	}
}

// scanOverdue returns how far the most overdue WAKING or LIVE consumer is
// past its deadline, and flags those past MaxLag as stuck.
func (s *stack) scanOverdue(ctx context.Context) time.Duration {
	var worst time.Duration
	for k := range numKinds {
		for _, p := range s.streamsOf[k] {
			c, err := s.store.GetConsumer(ctx, webhooks.ConsumerID(k.subscriptionID(), p))
			if err != nil || c.State == webhooks.StateIdle || c.State == webhooks.StateFailed {
				continue
			}
			if c.Deadline.IsZero() {
				s.v.add("consumer %s is %s without a deadline", c.ID, c.State)
				continue
			}
			late := time.Since(c.Deadline)
			if late > s.cfg.MaxLag {
				s.v.add("consumer %s stuck %s: %v past its deadline", c.ID, c.State, late.Round(time.Millisecond))
			}
			worst = max(worst, late)
		}
	}
	return worst
}

// drain waits until every working consumer is IDLE with all its events
// acked and every failing one is collected, or until cfg.Drain passes.
func (s *stack) drain(ctx context.Context) {
	deadline := time.Now().Add(s.cfg.Drain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if s.unsettled(ctx, 1) == nil {
			return
		}
		pollPause(ctx, 250*time.Millisecond)
	}
}

// unsettled returns up to limit descriptions of consumers not yet in their
// final state.
func (s *stack) unsettled(ctx context.Context, limit int) []string {
	var out []string
	for k := range numKinds {
		for _, p := range s.streamsOf[k] {
			if msg := s.settledState(ctx, k, p); msg != "" {
				out = append(out, msg)
				if len(out) == limit {
					return out
				}
			}
		}
	}
	return out
}

// settledState describes how the consumer of stream p of kind k differs
// from its final state, or returns "" if it is there: a working consumer
// IDLE with its whole stream acked, a failing one collected.
func (s *stack) settledState(ctx context.Context, k kind, p string) string {
	id := webhooks.ConsumerID(k.subscriptionID(), p)
	info, err := s.streams.Stream(ctx, p)
	if err != nil {
		return fmt.Sprintf("stream %s: %v", p, err)
	}
	c, err := s.store.GetConsumer(ctx, id)
	// Every stream was created after its subscription, so its consumer woke
	// at once, even if never appended to: a failing one is collected, as a
	// dead letter.
	if k.failing() {
		if err != nil {
			return fmt.Sprintf("consumer %s: %v", id, err)
		}
		if c.State != webhooks.StateFailed {
			return fmt.Sprintf("failing consumer %s not collected: %s, failing since %s", id, c.State, c.FailingSince.Format(time.StampMilli))
		}
		return ""
	}
	if err != nil {
		return fmt.Sprintf("consumer %s: %v", id, err)
	}
	want := info.Tail
	if c.State != webhooks.StateIdle || len(c.Streams) != 1 {
		return fmt.Sprintf("consumer %s is %s at %v, want IDLE at %s", id, c.State, c.Streams, want)
	}
	at := c.Streams[0].Offset
	// An empty stream has nothing to process. Its creation woke the
	// consumer; an agent that abandoned that wake (under load, its reads
	// outlive the request) leaves it at -1, and spec 001 wakes it only
	// for events.
	if info.Empty && at == webhooks.OffsetNone {
		if c.Epoch == 0 {
			return fmt.Sprintf("consumer %s of empty stream %s was never woken", id, p)
		}
		return ""
	}
	if at != want {
		return fmt.Sprintf("consumer %s is IDLE at %s, want IDLE at %s", id, at, want)
	}
	return ""
}

// finalChecks checks the settled system: every consumer in its final
// state, nothing scheduled, and no ack that was answered 200 lost.
func (s *stack) finalChecks(ctx context.Context) {
	for _, msg := range s.unsettled(ctx, maxViolationMessages) {
		s.v.add("not settled after %v: %s", s.cfg.Drain, msg)
	}
	if next, ok, err := s.store.NextDeadline(ctx); err != nil || ok {
		s.v.add("settled engine still has a deadline at %s (err %v)", next.Format(time.StampMilli), err)
	}
	for _, k := range []kind{kindHealthy, kindSlow} {
		for _, p := range s.streamsOf[k] {
			s.checkAcks(ctx, k, p)
		}
	}
}

// checkAcks checks that the Store holds at least every offset whose ack
// was answered 200. (That a working consumer acked its whole stream is
// checked by settledState: an agent whose webhook request timed out may
// never see the 200 of an ack the server applied.)
func (s *stack) checkAcks(ctx context.Context, k kind, p string) {
	id := webhooks.ConsumerID(k.subscriptionID(), p)
	acked, ok := s.ep.acks.get(id, p)
	if !ok {
		return
	}
	c, err := s.store.GetConsumer(ctx, id)
	switch {
	case err != nil:
		s.v.add("consumer %s acked %s and is gone: %v", id, acked, err)
	case compareOffsets(c.Streams[0].Offset, acked) < 0:
		s.v.add("consumer %s: ack of %s answered 200, but the Store holds %s", id, acked, c.Streams[0].Offset)
	}
}

// percentiles returns the p50, p99 and maximum of ds.
func percentiles(ds []time.Duration) [3]time.Duration {
	if len(ds) == 0 {
		return [3]time.Duration{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[int(q*float64(len(ds)-1))] }
	return [3]time.Duration{at(0.5), at(0.99), ds[len(ds)-1]}
}

// goroutineHeapBytes bounds the heap the runtime keeps, after they exit,
// for each goroutine that ran at once: their descriptors, kept for reuse.
const goroutineHeapBytes = 1 << 10

// heapAllowance is how far above the baseline the live heap may stay after
// a run that peaked at peak goroutines.
func (c Config) heapAllowance(peak int) uint64 {
	return c.HeapSlack + uint64(peak)*goroutineHeapBytes
}

// settle waits for the process's resources to return within the tolerance
// of before, and returns the last sample and whether they did.
func settle(ctx context.Context, cfg Config, before, peak Sample) (Sample, bool) {
	deadline := time.Now().Add(cfg.SettleWithin)
	for {
		now := takeSettledSample()
		ok := now.Goroutines <= before.Goroutines+cfg.GoroutineSlack &&
			now.HeapBytes <= before.HeapBytes+cfg.heapAllowance(peak.Goroutines) &&
			now.Conns <= before.Conns && now.FDs <= before.FDs
		if ok || !time.Now().Before(deadline) || ctx.Err() != nil {
			return now, ok
		}
		pollPause(ctx, 100*time.Millisecond)
	}
}

// loadAverage returns the one-minute load average, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

// goroutineDump returns the stacks of the running goroutines, grouped.
func goroutineDump() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// pollPause spaces out the polls of a condition.
func pollPause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// warmUp serves and makes one loopback request, so that state the process
// creates once, on first use, such as the network poller's descriptors, is
// in the baseline rather than counted as growth.
func warmUp(ctx context.Context) error {
	ln, url, err := listen()
	if err != nil {
		return err
	}
	srv := serve(ln, url, http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	tr := &http.Transport{}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = (&http.Client{Transport: tr}).Do(req); err == nil {
			resp.Body.Close()
		}
	}
	tr.CloseIdleConnections()
	return errors.Join(err, srv.close(ctx))
}
