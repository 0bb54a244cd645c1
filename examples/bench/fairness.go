package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// slowAnswer is how long a slow hostile endpoint takes to answer 200.
const slowAnswer = 2 * time.Second

// fairSpread is how the fairness figure spreads its hostile consumers:
// over subs subscriptions, on hosts webhook hosts.
type fairSpread struct {
	name        string
	subs, hosts int
}

// fairSpreads are the fairness figure's spreads of cfg.fairHostile
// consumers: one subscription, many subscriptions on one host, many hosts.
func fairSpreads(n int) []fairSpread {
	many := min(100, n)
	return []fairSpread{
		{"one_subscription", 1, 1},
		{"subs_one_host", many, 1},
		{"many_hosts", many, many},
	}
}

// fairness measures a healthy subscriber's wake latency on a quiet engine,
// for a third of cfg.fairFor, and then, in the same engine, for cfg.fairFor
// and at least cfg.fairSamples wakes, while cfg.fairHostile consumers'
// webhooks hang until the request timeout, reset the connection, or answer
// after slowAnswer, a third each, for each spread of them. It runs on
// memory Stores only: on a durable Store the scheduler's synced write per
// attempt, which no delivery policy can take off its path, would be
// measured instead of the isolation between destinations.
func fairness(ctx context.Context, b *bench) ([]result, error) {
	if b.kind.durable {
		return nil, nil
	}
	var out []result
	for _, s := range fairSpreads(b.cfg.fairHostile) {
		r, err := fairnessRun(ctx, b, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func fairnessRun(ctx context.Context, b *bench, s fairSpread) (_ result, err error) {
	n := b.cfg.fairHostile
	var hosts []*hostile
	defer func() {
		for _, h := range hosts {
			h.close()
		}
	}()
	for range s.hosts {
		h, err := newHostile()
		if err != nil {
			return result{}, err
		}
		hosts = append(hosts, h)
	}
	wake, arrivals := recordArrivals()
	e, err := b.start(ctx, wake)
	if err != nil {
		return result{}, err
	}
	// The hosts close first: the engine's Stop waits for the POSTs they
	// hold, and their close ends them.
	defer func() {
		for _, h := range hosts {
			h.close()
		}
		hosts = nil
		err = errors.Join(err, e.close())
	}()

	// The streams come first, for the reason wakeLatency gives.
	var hot []target
	for i := range hotStreams {
		path := "/lat/" + strconv.Itoa(i)
		hot = append(hot, target{path: path, id: webhooks.ConsumerID("lat", path)})
		if err := e.createStream(ctx, path); err != nil {
			return result{}, err
		}
	}
	if err := e.subscribe(ctx, "lat", "/lat/*"); err != nil {
		return result{}, err
	}
	// A third as long as the hostile spread: a p99 of a few hundred
	// milliseconds would mostly measure the machine's other load.
	quiet := &prober{e: e, targets: hot, arrivals: arrivals}
	if err := quiet.probeFor(ctx, b.cfg.fairSamples, b.cfg.fairFor/3); err != nil {
		return result{}, fmt.Errorf("quiet: %w", err)
	}

	// Hostile consumer i is stream /bad<sub>/<i> of subscription i mod
	// subs, whose webhook is on host sub mod hosts. Creating the stream
	// with a body wakes it.
	for sub := range s.subs {
		webhook := hosts[sub%len(hosts)].url + "/hook/" + strconv.Itoa(sub)
		if err := e.subscribeTo(ctx, "bad"+strconv.Itoa(sub), "/bad"+strconv.Itoa(sub)+"/*", webhook); err != nil {
			return result{}, err
		}
	}
	err = parallel(ctx, n, b.cfg.workers, func(i int) error {
		path := "/bad" + strconv.Itoa(i%s.subs) + "/" + strconv.Itoa(i)
		_, err := e.do(ctx, http.MethodPut, path, "application/octet-stream", payload, http.StatusCreated)
		return err
	})
	if err != nil {
		return result{}, err
	}
	if c, err := e.consumers(ctx); err != nil || c != n+hotStreams {
		return result{}, fmt.Errorf("store has %d consumers, want %d (%v)", c, n+hotStreams, err)
	}
	if err := stormUnderway(ctx, e); err != nil {
		return result{}, err
	}
	// Long enough, by default, for the hostile attempts' WAKING timeout to
	// pass and their retries to begin.
	storm := &prober{e: e, targets: hot, arrivals: arrivals}
	if err := storm.probeFor(ctx, b.cfg.fairSamples, b.cfg.fairFor); err != nil {
		return result{}, fmt.Errorf("hostile: %w", err)
	}
	var posts int64
	for _, h := range hosts {
		posts += h.posts()
	}

	q, l := summarize(quiet.fromSend), summarize(storm.fromSend)
	ratio := float64(l.p99) / float64(q.p99)
	r := result{name: "fairness", label: fmt.Sprintf("healthy wake latency, %d hostile (%s)", n, strings.ReplaceAll(s.name, "_", " "))}
	r.add("spread", s.name)
	r.add("hostile", n)
	r.add("subs", s.subs)
	r.add("hosts", s.hosts)
	r.add("samples", l.n)
	q.addTo(&r, "quiet_")
	l.addTo(&r, "")
	r.add("p99_ratio", fmt.Sprintf("%.2f", ratio))
	r.add("hostile_posts", posts)
	r.value = fmt.Sprintf("%v; quiet %v (p99 %.2f×)", l, q, ratio)
	r.goal = "p99 ≤ 2× quiet"
	r.met = ratio <= 2
	return r, nil
}

// probeFor probes until it has recorded n wakes and d has passed, after a
// warm-up as probeAll makes.
func (p *prober) probeFor(ctx context.Context, n int, d time.Duration) error {
	for range min(n/10, 200) {
		if err := p.probe(ctx, false); err != nil {
			return err
		}
	}
	for end := time.Now().Add(d); len(p.fromSend) < n || time.Now().Before(end); {
		if err := p.probe(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

// stormUnderway waits until the engine has marked every hostile wake's
// first attempt as sent: no consumer is overdue.
func stormUnderway(ctx context.Context, e *env) error {
	deadline := time.Now().Add(waitFor)
	for {
		due, err := e.store.DueConsumers(ctx, time.Now(), 1)
		if err != nil || len(due) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hostile wakes still due after %v", waitFor)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// subscribeTo creates subscription id on pattern with the given webhook,
// whose notifications nobody verifies.
func (e *env) subscribeTo(ctx context.Context, id, pattern, webhook string) error {
	body, _ := json.Marshal(map[string]any{"webhook": webhook, "max_deliveries_per_minute": 0})
	_, err := e.do(ctx, http.MethodPut, pattern+"?subscription="+id, "application/json", body, http.StatusCreated)
	return err
}

// hostile is a webhook host on its own loopback listener that treats each
// notification by the number that ends its primary stream: hang until the
// engine gives up, reset the connection, or answer after slowAnswer.
type hostile struct {
	srv     *http.Server
	url     string
	stop    chan struct{}
	handled sync.WaitGroup
	mu      sync.Mutex
	n       int64
}

func newHostile() (*hostile, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hostile{url: "http://" + ln.Addr().String(), stop: make(chan struct{})}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: waitFor}
	go func() { _ = h.srv.Serve(ln) }()
	return h, nil
}

func (h *hostile) serve(w http.ResponseWriter, r *http.Request) {
	h.handled.Add(1)
	defer h.handled.Done()
	h.mu.Lock()
	h.n++
	h.mu.Unlock()
	var n struct {
		PrimaryStream string `json:"primary_stream"`
	}
	data, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(data, &n)
	i, _ := strconv.Atoi(n.PrimaryStream[strings.LastIndexByte(n.PrimaryStream, '/')+1:])
	switch i % 3 {
	case 0:
		select {
		case <-r.Context().Done():
		case <-h.stop:
		}
	case 1:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = conn.Close()
		}
	default:
		t := time.NewTimer(slowAnswer)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		case <-h.stop:
		}
	}
}

// posts is how many notifications the host got.
func (h *hostile) posts() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *hostile) close() {
	close(h.stop)
	_ = h.srv.Close()
	h.handled.Wait()
}
