package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/pgstore"
)

// hotStreams are the streams appended to while latency is measured, each
// with one consumer of the subscription hotSubscription.
const (
	hotStreams      = 8
	hotSubscription = "hot"
	poolConns       = 16
)

// countingStore counts the engine's reads that the figures are about.
type countingStore struct {
	*pgstore.Store
	byStream, byStreamRows, due, next, lists atomic.Int64
	dueNanos, nextNanos                      atomic.Int64
	// listsAfter holds the UnixNano after which a list started counts for
	// listedAfter, which is set once one has ended.
	listsAfter  atomic.Int64
	listedAfter atomic.Bool
}

func (s *countingStore) ConsumersByStream(ctx context.Context, path string) ([]*webhooks.Consumer, error) {
	out, err := s.Store.ConsumersByStream(ctx, path)
	s.byStream.Add(1)
	s.byStreamRows.Add(int64(len(out)))
	return out, err
}

func (s *countingStore) DueConsumers(ctx context.Context, now time.Time, limit int) ([]*webhooks.Consumer, error) {
	t := time.Now()
	out, err := s.Store.DueConsumers(ctx, now, limit)
	s.dueNanos.Add(int64(time.Since(t)))
	s.due.Add(1)
	return out, err
}

func (s *countingStore) NextDeadline(ctx context.Context) (time.Time, bool, error) {
	t := time.Now()
	d, ok, err := s.Store.NextDeadline(ctx)
	s.nextNanos.Add(int64(time.Since(t)))
	s.next.Add(1)
	return d, ok, err
}

func (s *countingStore) ListSubscriptions(ctx context.Context) ([]*webhooks.Subscription, error) {
	s.lists.Add(1)
	t := time.Now().UnixNano()
	out, err := s.Store.ListSubscriptions(ctx)
	if after := s.listsAfter.Load(); after != 0 && t > after && err == nil {
		s.listedAfter.Store(true)
	}
	return out, err
}

// env is one engine on one seeded schema, with its streams and receiver.
type env struct {
	name      string
	subs      int
	consumers int
	deadlines bool
	pool      *pgxpool.Pool
	store     *countingStore
	source    *source
	engine    *webhooks.Engine
	hook      *hookServer
	tail      int
}

// layout reads what seed wrote in schema.
func layout(ctx context.Context, pool *pgxpool.Pool, e *env) error {
	return pool.QueryRow(ctx, "SELECT subs, consumers, deadlines FROM capacity_layout").Scan(&e.subs, &e.consumers, &e.deadlines)
}

// openEnv builds the streams of schema's layout, and the Store and engine
// on it, unstarted, with the hot subscription and its consumers stored
// afresh.
func openEnv(ctx context.Context, c config, schema string) (*env, error) {
	pool, store, err := openStore(ctx, c.dsn, schema, poolConns)
	if err != nil {
		return nil, err
	}
	e := &env{name: schema, pool: pool, store: &countingStore{Store: store}, source: newSource(), tail: 100}
	if err := layout(ctx, pool, e); err != nil {
		pool.Close()
		return nil, fmt.Errorf("schema %s is not seeded: %w", schema, err)
	}
	for j := range e.consumers {
		e.source.put(streamPath(e.subs, j), seedTail)
	}
	for i := range hotStreams {
		e.source.put(hotPath(i), seedTail)
	}
	for j := range c.pad {
		e.source.put("/pad/"+strconv.Itoa(j), seedTail)
	}
	if e.hook, err = newHookServer(); err != nil {
		pool.Close()
		return nil, err
	}
	if err := store.DeleteSubscription(ctx, hotSubscription); err != nil && !errors.Is(err, webhooks.ErrSubscriptionNotFound) {
		return nil, err
	}
	now := time.Now()
	if err := store.CreateSubscription(ctx, &webhooks.Subscription{ID: hotSubscription, Pattern: "/hot/*", Webhook: e.hook.url, Secret: "capacity-hot-secret-0123456789ab", CreatedAt: now}); err != nil {
		return nil, err
	}
	for i := range hotStreams {
		p := hotPath(i)
		con := &webhooks.Consumer{ID: webhooks.ConsumerID(hotSubscription, p), SubscriptionID: hotSubscription, PrimaryStream: p,
			State: webhooks.StateIdle, Streams: []webhooks.StreamOffset{{Path: p, Offset: seedTail}}, CreatedAt: now, UpdatedAt: now}
		if err := store.CreateConsumer(ctx, con); err != nil {
			return nil, err
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	e.engine, err = webhooks.New(e.store, e.source,
		webhooks.WithCallbackBaseURL("http://127.0.0.1:9/"),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
		webhooks.WithLogger(log))
	if err != nil {
		return nil, err
	}
	return e, nil
}

func hotPath(i int) string { return "/hot/" + strconv.Itoa(i) }

func (e *env) close() {
	_ = e.engine.Stop(context.Background())
	_ = e.hook.srv.Close()
	e.pool.Close()
}

// start starts the engine and waits for its start-up sweep, which reads
// every stream's consumers once.
func (e *env) start(ctx context.Context) (startTook, sweepTook time.Duration, err error) {
	t := time.Now()
	if err := e.engine.Start(ctx); err != nil {
		return 0, 0, err
	}
	startTook = time.Since(t)
	streams := int64(e.consumers + hotStreams)
	for e.store.byStream.Load() < streams {
		time.Sleep(10 * time.Millisecond)
	}
	return startTook, time.Since(t), nil
}

// appendAndWait appends to hot stream i and returns how long until its
// webhook arrived.
func (e *env) appendAndWait(ctx context.Context, i int) (time.Duration, error) {
	e.tail++
	p := hotPath(i % hotStreams)
	e.source.put(p, fmt.Sprintf("%016d", e.tail))
	t := time.Now()
	if err := e.engine.StreamAppended(ctx, p); err != nil {
		return 0, err
	}
	select {
	case at := <-e.hook.got:
		return at.Sub(t), nil
	case <-time.After(30 * time.Second):
		return 0, fmt.Errorf("no webhook for %s within 30 s", p)
	}
}

// hookServer answers every wake {"done":true}, which acks the wake's
// tails, and reports when each arrived.
type hookServer struct {
	url string
	srv *http.Server
	got chan time.Time
}

func newHookServer() (*hookServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hookServer{url: "http://" + ln.Addr().String() + "/hook", got: make(chan time.Time, 16)}
	h.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"done":true}`)
		h.got <- at
	})}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

// memory returns the live heap after a GC, and the RSS after returning
// freed memory to the OS.
func memory() (heap, rss uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, _ := os.ReadFile("/proc/self/status")
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			rss = kb * 1024
		}
	}
	return ms.HeapAlloc, rss
}

// memClasses are the runtime's memory classes that make up the RSS: the
// live heap, the free space in its spans (fragmentation), stacks and the
// runtime's own metadata.
var memClasses = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/os-stacks:bytes",
	"/memory/classes/metadata/mspan/inuse:bytes",
	"/memory/classes/metadata/other:bytes",
	"/memory/classes/other:bytes",
	"/memory/classes/profiling/buckets:bytes",
}

// readClasses reads memClasses, after memory has run.
func readClasses() []uint64 {
	samples := make([]metrics.Sample, len(memClasses))
	for i, name := range memClasses {
		samples[i].Name = name
	}
	metrics.Read(samples)
	out := make([]uint64, len(samples))
	for i, s := range samples {
		out[i] = s.Value.Uint64()
	}
	return out
}

// classDeltas formats what each memory class grew by from a to b.
func classDeltas(a, b []uint64) string {
	var sb strings.Builder
	for i, name := range memClasses {
		name = strings.TrimSuffix(strings.TrimPrefix(name, "/memory/classes/"), ":bytes")
		fmt.Fprintf(&sb, " %s_mb=%.1f", strings.NewReplacer("/", "_", "-", "_").Replace(name), mb(int64(b[i])-int64(a[i])))
	}
	return sb.String()
}

// cpu returns the process's CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(ctx context.Context, c config) error {
	heap0, rss0 := memory()
	e, err := openEnv(ctx, c, c.schema)
	if err != nil {
		return err
	}
	defer e.close()
	heap1, rss1 := memory()
	classes1 := readClasses()
	startTook, sweepTook, err := e.start(ctx)
	if err != nil {
		return err
	}
	heap2, rss2 := memory()
	classes2 := readClasses()
	if c.heapProfile != "" {
		if err := writeHeapProfile(c.heapProfile); err != nil {
			return err
		}
	}
	fmt.Printf("CAPACITY start schema=%s subs=%d consumers=%d deadlines=%t start_ms=%.1f sweep_s=%.2f sweep_stream_reads=%d sweep_consumers_read=%d\n",
		e.name, e.subs, e.consumers, e.deadlines, ms(startTook), sweepTook.Seconds(), e.store.byStream.Load(), e.store.byStreamRows.Load())
	fmt.Printf("CAPACITY memory schema=%s subs=%d consumers=%d streams_heap_mb=%.1f streams_rss_mb=%.1f engine_heap_mb=%.1f engine_rss_mb=%.1f process_rss_mb=%.1f\n",
		e.name, e.subs, e.consumers, mb(heap1-heap0), mb(rss1-rss0), mb(heap2-heap1), mb(int64(rss2)-int64(rss1)), mb(rss2))
	fmt.Printf("CAPACITY memclasses schema=%s consumers=%d%s\n", e.name, e.consumers, classDeltas(classes1, classes2))

	// The idle engine: its scheduler polls the Store's deadlines.
	idleFor := c.idleFor
	if idleFor == 0 {
		idleFor = 10 * webhooks.DefaultPollInterval
	}
	due0, next0, dn0, nn0 := e.store.due.Load(), e.store.next.Load(), e.store.dueNanos.Load(), e.store.nextNanos.Load()
	cpu0 := cpu()
	time.Sleep(idleFor)
	cpuIdle := cpu() - cpu0
	due, next := e.store.due.Load()-due0, e.store.next.Load()-next0
	fmt.Printf("CAPACITY idle schema=%s consumers=%d deadlines=%t seconds=%.0f cpu_ms_per_s=%.2f due_calls=%d due_us=%.0f next_calls=%d next_us=%.0f\n",
		e.name, e.consumers, e.deadlines, idleFor.Seconds(), ms(cpuIdle)/idleFor.Seconds(),
		due, us(e.store.dueNanos.Load()-dn0)/float64(max(due, 1)), next, us(e.store.nextNanos.Load()-nn0)/float64(max(next, 1)))
	if err := explainScheduler(ctx, e.pool); err != nil {
		return err
	}

	// Append → wake, in turns with the baseline engine if there is one.
	envs := []*env{e}
	if c.baseline != "" {
		b, err := openEnv(ctx, c, c.baseline)
		if err != nil {
			return err
		}
		defer b.close()
		if _, _, err := b.start(ctx); err != nil {
			return err
		}
		envs = append(envs, b)
	}
	lat := make([][]time.Duration, len(envs))
	const rounds = 10
	for r := range rounds {
		for k, x := range envs {
			for i := range c.samples / rounds {
				d, err := x.appendAndWait(ctx, r*c.samples+i)
				if err != nil {
					return err
				}
				lat[k] = append(lat[k], d)
			}
		}
	}
	for k, x := range envs {
		slices.Sort(lat[k])
		q := func(f float64) float64 { return us(int64(lat[k][int(f*float64(len(lat[k])-1))])) }
		fmt.Printf("CAPACITY wake schema=%s consumers=%d samples=%d p50_us=%.0f p99_us=%.0f max_us=%.0f\n", x.name, x.consumers, len(lat[k]), q(0.5), q(0.99), q(1))
	}
	return nil
}

// explainScheduler prints what the scheduler's two queries cost the
// database, from their plans.
func explainScheduler(ctx context.Context, pool *pgxpool.Pool) error {
	for _, q := range []struct{ name, sql string }{
		{"due", fmt.Sprintf(`EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) SELECT c.id FROM streamhooks_consumers c
			WHERE c.deadline IS NOT NULL AND c.deadline <= %d ORDER BY c.deadline, c.id LIMIT 256`, time.Now().UnixNano())},
		{"next", "EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) SELECT min(deadline) FROM streamhooks_consumers WHERE deadline IS NOT NULL"},
	} {
		rows, err := pool.Query(ctx, q.sql)
		if err != nil {
			return err
		}
		var lines []string
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				return err
			}
			lines = append(lines, strings.TrimSpace(l))
		}
		if err := rows.Err(); err != nil {
			return err
		}
		fmt.Printf("CAPACITY plan %s: %s\n", q.name, strings.Join(lines, " | "))
	}
	return nil
}

func ms(d time.Duration) float64       { return float64(d) / 1e6 }
func us(n int64) float64               { return float64(n) / 1e3 }
func mb[T int64 | uint64](n T) float64 { return float64(int64(n)) / (1 << 20) }

// writeHeapProfile writes the live heap as of the last GC to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.WriteHeapProfile(f), f.Close())
}
