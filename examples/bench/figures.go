package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// hotStreams is how many streams the latency figures append to in turn, so
// that a consumer has long finished its last wake when it is appended to
// again.
const hotStreams = 8

// wakeLatency measures how long after an append its webhook arrives, with
// cfg.idle idle consumers, capped, in the Store.
func wakeLatency(ctx context.Context, b *bench) (_ []result, err error) {
	idle := b.capped(b.cfg.idle)
	wake, arrivals := recordArrivals()
	e, err := b.start(ctx, wake)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, e.close()) }()

	// Streams are created before the subscription adopts them, IDLE at
	// their tails: a stream created after it would wake its consumer at
	// once, and that wake would be taken for the first measured one.
	if err := e.createStreams(ctx, idle, func(i int) string { return "/idle/" + strconv.Itoa(i) }); err != nil {
		return nil, err
	}
	if err := e.subscribe(ctx, "idle", "/idle/*"); err != nil {
		return nil, err
	}
	hot, err := e.createHotStreams(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.subscribe(ctx, "lat", "/lat/*"); err != nil {
		return nil, err
	}
	if n, err := e.consumers(ctx); err != nil || n != idle+hotStreams {
		return nil, fmt.Errorf("store has %d consumers, want %d (%v)", n, idle+hotStreams, err)
	}
	p := &prober{e: e, targets: hot, arrivals: arrivals}
	if err := probeAll(ctx, b.cfg.samples, p); err != nil {
		return nil, err
	}
	l := summarize(p.fromSend)
	r := result{name: "wake_latency", label: "wake latency"}
	r.add("idle", idle)
	r.add("samples", l.n)
	l.addTo(&r, "")
	summarize(p.fromResp).addTo(&r, "from_response_")
	r.value = fmt.Sprintf("%d idle: %v", idle, l)
	r.goal = "p50 ≤ 1ms, p99 ≤ 5ms"
	r.met = l.p50 <= time.Millisecond && l.p99 <= 5*time.Millisecond
	return []result{r}, nil
}

// target is a stream the latency figures append to, and the consumer that
// must wake.
type target struct{ path, id string }

// createHotStreams creates the latency figures' hotStreams streams under
// /lat/, whose consumers subscription "lat" gets.
func (e *env) createHotStreams(ctx context.Context) ([]target, error) {
	var hot []target
	for i := range hotStreams {
		path := "/lat/" + strconv.Itoa(i)
		hot = append(hot, target{path: path, id: webhooks.ConsumerID("lat", path)})
		if err := e.createStream(ctx, path); err != nil {
			return nil, err
		}
	}
	return hot, nil
}

// arrival is a webhook as the receiver saw it.
type arrival struct {
	id string
	at time.Time
}

// recordArrivals returns an onWake that reports every notification on the
// channel and finishes its wake synchronously, as a consumer with nothing
// to do would.
func recordArrivals() (onWake, <-chan arrival) {
	ch := make(chan arrival, 1024)
	return func(n *receiver.Notification, at time.Time) bool {
		select {
		case ch <- arrival{id: n.ConsumerID, at: at}:
		default:
		}
		return true
	}, ch
}

// prober measures wake latency on one server: it appends to its targets
// in turn, one append at a time, and notes when each target's webhook
// arrived, after the append was sent and after its response was read. The
// server wakes the consumer before it answers the append, so the webhook
// often beats the response and the second figure is then negative; the
// first, which includes the append's own round trip, is the one held to the
// goals.
type prober struct {
	e                  *env
	targets            []target
	arrivals           <-chan arrival
	next               int
	fromSend, fromResp []time.Duration
}

// probe makes one append and waits for its webhook; it records the result
// only if record is set, so that the first probes can warm up.
func (p *prober) probe(ctx context.Context, record bool) error {
	t := p.targets[p.next%len(p.targets)]
	p.next++
	sent := time.Now()
	if _, err := p.e.appendTo(ctx, t.path); err != nil {
		return err
	}
	answered := time.Now()
	a, err := await(p.arrivals, t.id)
	if err != nil {
		return err
	}
	if record {
		p.fromSend = append(p.fromSend, a.at.Sub(sent))
		p.fromResp = append(p.fromResp, a.at.Sub(answered))
	}
	return nil
}

// probeAll probes each prober in turn, n recorded rounds after a tenth as
// many, up to 200, of warm-up. Taking turns exposes every server to the same
// drift in the CPU this process gets from a shared machine.
func probeAll(ctx context.Context, n int, ps ...*prober) error {
	warm := min(n/10, 200)
	for i := range warm + n {
		for _, p := range ps {
			if err := p.probe(ctx, i >= warm); err != nil {
				return err
			}
		}
	}
	return nil
}

// await waits for consumer id's webhook, skipping others.
func await(arrivals <-chan arrival, id string) (arrival, error) {
	timeout := time.NewTimer(waitFor)
	defer timeout.Stop()
	for {
		select {
		case a := <-arrivals:
			if a.id == id {
				return a, nil
			}
		case <-timeout.C:
			return arrival{}, fmt.Errorf("no webhook for %s within %v", id, waitFor)
		}
	}
}

// inbox hands each consumer's notifications to the goroutine that plays
// that consumer.
type inbox map[string]chan *receiver.Notification

func newInbox(sub string, paths []string) inbox {
	in := make(inbox, len(paths))
	for _, p := range paths {
		in[webhooks.ConsumerID(sub, p)] = make(chan *receiver.Notification, 4)
	}
	return in
}

// wake is an onWake that answers 200 without done: the consumer calls
// back.
func (in inbox) wake(n *receiver.Notification, _ time.Time) bool {
	if ch, ok := in[n.ConsumerID]; ok {
		select {
		case ch <- n:
		default:
		}
	}
	return false
}

func (in inbox) await(id string) (*receiver.Notification, error) {
	select {
	case n := <-in[id]:
		return n, nil
	case <-time.After(waitFor):
		return nil, fmt.Errorf("no webhook for %s within %v", id, waitFor)
	}
}

func streamNames(prefix string, n int) []string {
	paths := make([]string, n)
	for i := range paths {
		paths[i] = prefix + strconv.Itoa(i)
	}
	return paths
}

// fanOut measures wake latency with each of cfg.fanout subscriptions,
// capped, in the Store, every append matching exactly one of them. The servers run side
// by side and are probed in turn, so that their figures compare.
func fanOut(ctx context.Context, b *bench) (_ []result, err error) {
	sizes := b.fanoutSizes()
	var probers []*prober
	var rates []float64
	defer func() {
		for _, p := range probers {
			err = errors.Join(err, p.e.close())
		}
	}()
	for _, s := range sizes {
		p, rate, err := fanOutServer(ctx, b, s)
		if err != nil {
			return nil, fmt.Errorf("%d subscriptions: %w", s, err)
		}
		probers = append(probers, p)
		rates = append(rates, rate)
	}
	if err := probeAll(ctx, b.cfg.samples, probers...); err != nil {
		return nil, err
	}
	var out []result
	base := summarize(probers[0].fromSend)
	for i, s := range sizes {
		l := summarize(probers[i].fromSend)
		r := result{name: "fanout", label: fmt.Sprintf("fan-out wake latency, %d subscriptions", s)}
		r.add("subs", s)
		r.add("samples", l.n)
		l.addTo(&r, "")
		r.add("subs_created_per_s", int64(rates[i]))
		r.value = l.String()
		if i > 0 {
			ratio := float64(l.p50) / float64(base.p50)
			r.add("p50_ratio", fmt.Sprintf("%.2f", ratio))
			r.value += fmt.Sprintf(" (p50 %.2f× S=%d)", ratio, sizes[0])
			r.goal = fmt.Sprintf("p50 ≤ 1.5× S=%d", sizes[0])
			r.met = ratio <= 1.5
		}
		out = append(out, r)
	}
	return out, nil
}

// fanOutWildcards are the wildcard subscriptions of the fan-out figure;
// none matches a target stream, but the index must walk them.
var fanOutWildcards = []string{"/fan/*/never", "/**/inbox", "/fan/**/deep"}

// fanOutServer starts a server with s subscriptions, the wildcards and
// distinct literal patterns, and returns a prober of streams that each
// match one literal. It also returns how many subscriptions per second the
// API created.
func fanOutServer(ctx context.Context, b *bench, s int) (_ *prober, _ float64, err error) {
	literals := s - len(fanOutWildcards)
	if literals < 1 {
		return nil, 0, fmt.Errorf("fan-out needs at least %d subscriptions", len(fanOutWildcards)+1)
	}
	wake, arrivals := recordArrivals()
	e, err := b.start(ctx, wake)
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
		}
	}()
	literal := func(i int) string { return fmt.Sprintf("/fan/t%d/s%d", i%1000, i) }
	// The streams come first, for the reason wakeLatency gives.
	var hot []target
	for i := range min(hotStreams, literals) {
		path := literal(i)
		hot = append(hot, target{path: path, id: webhooks.ConsumerID("f"+strconv.Itoa(i), path)})
		if err := e.createStream(ctx, path); err != nil {
			return nil, 0, err
		}
	}
	start := time.Now()
	err = parallel(ctx, s, b.cfg.workers, func(i int) error {
		if i < len(fanOutWildcards) {
			return e.subscribe(ctx, "w"+strconv.Itoa(i), fanOutWildcards[i])
		}
		i -= len(fanOutWildcards)
		return e.subscribe(ctx, "f"+strconv.Itoa(i), literal(i))
	})
	if err != nil {
		return nil, 0, err
	}
	rate := float64(s) / time.Since(start).Seconds()
	if n, err := e.consumers(ctx); err != nil || n != len(hot) {
		return nil, 0, fmt.Errorf("store has %d consumers, want %d (%v)", n, len(hot), err)
	}
	return &prober{e: e, targets: hot, arrivals: arrivals}, rate, nil
}

// idleScale measures what cfg.idleK consumers at rest, capped, cost: heap, RSS and the Store's files each, the time to
// create them, and the goroutines they add (none).
func idleScale(ctx context.Context, b *bench) (_ []result, err error) {
	e, err := b.start(ctx, func(*receiver.Notification, time.Time) bool { return true })
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	k := b.capped(b.cfg.idleK)

	heap0 := heapAfterGC()
	start := time.Now()
	// The host's streams first, so that their cost is not counted as the
	// consumers'.
	if err := e.createStreams(ctx, k, func(i int) string { return "/idle/" + strconv.Itoa(i) }); err != nil {
		return nil, err
	}
	streamsTook := time.Since(start)
	heap1, rss1, g1 := heapAfterGC(), rss(), runtime.NumGoroutine()
	disk1, err := dirSize(e.dir)
	if err != nil {
		return nil, err
	}

	// One subscription adopts every stream: k IDLE consumers.
	start = time.Now()
	if err := e.subscribe(ctx, "idle", "/idle/*"); err != nil {
		return nil, err
	}
	took := time.Since(start)
	heap2, rss2, g2 := heapAfterGC(), rss(), runtime.NumGoroutine()
	disk2, err := dirSize(e.dir)
	if err != nil {
		return nil, err
	}
	if n, err := e.consumers(ctx); err != nil || n != k {
		return nil, fmt.Errorf("store has %d consumers, want %d (%v)", n, k, err)
	}

	heapPer := bytesPer(int64(heap2)-int64(heap1), k)
	rssPer := bytesPer(rss2-rss1, k)
	diskPer := bytesPer(disk2-disk1, k)
	r := result{name: "idle_scale", label: "idle consumers at rest"}
	r.add("k", k)
	r.add("heap_bytes_per_consumer", int64(heapPer))
	r.add("rss_bytes_per_consumer", int64(rssPer))
	r.add("disk_bytes_per_consumer", int64(diskPer))
	r.add("create_ms", took.Milliseconds())
	r.add("consumers_per_s", int64(float64(k)/took.Seconds()))
	r.add("goroutines_before", g1)
	r.add("goroutines_after", g2)
	r.add("stream_heap_bytes", int64(bytesPer(int64(heap1)-int64(heap0), k)))
	r.add("streams_create_ms", streamsTook.Milliseconds())
	r.value = fmt.Sprintf("K=%d: heap %.0f B, RSS %.0f B, disk %.0f B each; created in %v (%.0f/s); goroutines %d → %d",
		k, heapPer, rssPer, diskPer, round(took), float64(k)/took.Seconds(), g1, g2)
	r.goal = "≤ 1 KiB each, no goroutine each"
	r.met = heapPer <= 1024 && rssPer <= 1024 && g2-g1 < 8
	return []result{r}, nil
}

// heapAfterGC is the live heap once garbage is collected and returned to
// the OS. The first collection empties sync.Pools into their victim caches,
// the second frees those.
func heapAfterGC() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// dirSize is the size of the files in dir and its subdirectories: a
// durable Store's database, with its write-ahead log.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	return n, err
}

// rss is the process's resident set size from /proc/self/status, or 0
// where there is none.
func rss() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// callbackRate measures ack-only callbacks per second on LIVE consumers,
// one client each, alternating with the bare handler at the same
// concurrency for comparison.
func callbackRate(ctx context.Context, b *bench) (_ []result, err error) {
	c := b.cfg.callbackC
	bareURL, stopBare, err := startBare()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stopBare(ctx)) }()
	paths := streamNames("/cb/", c)
	in := newInbox("cb", paths)
	e, err := b.start(ctx, in.wake)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	// The streams come first, for the reason wakeLatency gives.
	if err := e.createStreams(ctx, c, func(i int) string { return paths[i] }); err != nil {
		return nil, err
	}
	if err := e.subscribe(ctx, "cb", "/cb/*"); err != nil {
		return nil, err
	}
	// Wake each consumer and claim the wake: it is LIVE from then on, and
	// every ack restarts its liveness timeout.
	clients := make([]*receiver.CallbackClient, c)
	acks := make([]webhooks.StreamOffset, c)
	err = parallel(ctx, c, b.cfg.workers, func(i int) error {
		tail, err := e.appendTo(ctx, paths[i])
		if err != nil {
			return err
		}
		n, err := in.await(webhooks.ConsumerID("cb", paths[i]))
		if err != nil {
			return err
		}
		clients[i] = receiver.NewCallbackClient(n, b.hc)
		acks[i] = webhooks.StreamOffset{Path: paths[i], Offset: tail}
		_, err = clients[i].Ack(ctx, acks[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	if counts, err := e.store.CountConsumers(ctx); err != nil || counts[webhooks.StateLive] != c {
		return nil, fmt.Errorf("%d LIVE consumers, want %d (%v)", counts[webhooks.StateLive], c, err)
	}
	ack := func(i int) error {
		_, err := clients[i].Ack(ctx, acks[i])
		return err
	}
	bare := func(int) error { return postBare(ctx, b.hc, bareURL) }
	bareTotal, ackTotal, err := alternate(ctx, c, b.cfg.callbackFor, bare, ack)
	if err != nil {
		return nil, err
	}
	rate, bareRate := ackTotal.rate(), bareTotal.rate()
	l := summarize(ackTotal.took)
	r := result{name: "callback_ack", label: fmt.Sprintf("ack callbacks/s, %d clients", c)}
	r.add("c", c)
	r.add("callbacks", ackTotal.n)
	r.add("callbacks_per_s", int64(rate))
	l.addTo(&r, "")
	r.add("bare_rps", int64(bareRate))
	r.add("fraction", fmt.Sprintf("%.2f", rate/bareRate))
	r.add("cpu_us_per_callback", fmt.Sprintf("%.1f", us64(ackTotal.cpuPer())))
	r.add("cpu_us_per_bare", fmt.Sprintf("%.1f", us64(bareTotal.cpuPer())))
	summarize(bareTotal.took).addTo(&r, "bare_")
	r.value = fmt.Sprintf("%.0f/s = %.2f of bare %.0f req/s (%v; bare p99 %v)", rate, rate/bareRate, bareRate, l, round(summarize(bareTotal.took).p99))
	return []result{r}, nil
}
