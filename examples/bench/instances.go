package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/examples/internal/exampleserver"
	"github.com/streamhooks/webhooks/pgstore"
	"github.com/streamhooks/webhooks/receiver"
)

// instanceCounts are the numbers of servers the instances figure compares.
var instanceCounts = []int{1, 2, 3}

// instanceRounds is how many times each count is measured, in turns, so
// that the counts share the machine's drift.
const instanceRounds = 3

// cluster is n example servers sharing one fresh PostgreSQL schema: their
// streams and their engines' state.
type cluster struct {
	dsn     string
	drop    func() error
	servers []*exampleserver.Running
	recv    *hookServer
}

// startCluster starts n servers on a fresh schema of the database at dsn.
// Before the others start, the first creates the streams paths and then
// subscription sub on pattern, with its webhook on a receiver that hands
// notifications to wake.
func startCluster(ctx context.Context, b *bench, dsn string, n int, sub, pattern string, paths []string, wake onWake, opts ...webhooks.Option) (_ *cluster, err error) {
	c := &cluster{}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close())
		}
	}()
	if c.dsn, c.drop, err = clusterDSN(ctx, dsn); err != nil {
		return c, err
	}
	if c.recv, err = newHookServer(wake, nil); err != nil {
		return c, err
	}
	for i := range n {
		srv, err := exampleserver.Start(ctx, exampleserver.Config{
			Addr: "127.0.0.1:0", Dev: true, Logger: quietLogger(), Postgres: c.dsn, EngineOptions: opts,
		})
		if err != nil {
			return c, err
		}
		c.servers = append(c.servers, srv)
		if i > 0 {
			continue
		}
		// The streams come first, as in wakeCycle.
		e := &env{b: b, srv: srv, recv: c.recv}
		if err := e.createStreams(ctx, len(paths), func(i int) string { return paths[i] }); err != nil {
			return c, err
		}
		if err := e.subscribe(ctx, sub, pattern); err != nil {
			return c, err
		}
	}
	return c, nil
}

// on returns an env that sends requests to server i.
func (c *cluster) on(b *bench, i int) *env {
	return &env{b: b, srv: c.servers[i%len(c.servers)], recv: c.recv}
}

func (c *cluster) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	var err error
	for _, s := range c.servers {
		if s != nil {
			err = errors.Join(err, s.Close(ctx))
		}
	}
	if c.recv != nil {
		err = errors.Join(err, c.recv.close(ctx))
	}
	if c.drop != nil {
		err = errors.Join(err, c.drop())
	}
	return err
}

// clusterDSN creates a schema in the database at dsn and returns a DSN
// whose connections use it, with as many pooled connections per server as
// the postgres Store gets, and a function that drops the schema.
func clusterDSN(ctx context.Context, dsn string) (string, func() error, error) {
	schema, drop, err := newSchema(ctx, dsn)
	if err != nil {
		return "", nil, err
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return fmt.Sprintf("%s%ssearch_path=%s&pool_max_conns=%d", dsn, sep, schema, postgresConns), drop, nil
}

// callbackOn points n's callback at server i, as a load balancer in front
// of the servers would send it anywhere.
func (c *cluster) callbackOn(n *receiver.Notification, i int) {
	u, err := url.Parse(n.Callback)
	if err != nil {
		return
	}
	n.Callback = c.servers[i%len(c.servers)].URL + u.Path
}

// instances measures wake cycles/s with one, two and three example servers
// on one PostgreSQL database, each keeping its streams and its engine's
// state there. Cycle i appends through server i mod n and calls back on the
// next server, so that every cycle crosses instances. Each count runs
// instanceRounds times, in turns. It runs on the postgres Store only.
func instances(ctx context.Context, b *bench) (_ []result, err error) {
	if b.store != "postgres" {
		return nil, nil
	}
	c := b.cfg.cycleC
	paths := streamNames("/inst/", c)
	totals := map[int]phase{}
	for range instanceRounds {
		for _, n := range instanceCounts {
			p, err := instanceRound(ctx, b, n, paths)
			if err != nil {
				return nil, fmt.Errorf("%d instances: %w", n, err)
			}
			q := totals[n]
			q.add(p)
			totals[n] = q
		}
	}
	one := totals[1].rate()
	r := result{name: "instances", label: fmt.Sprintf("wake cycles/s on 1/2/3 servers, %d consumers", c)}
	var parts []string
	for _, n := range instanceCounts {
		rate := totals[n].rate()
		r.add(fmt.Sprintf("cycles_per_s_%d", n), int64(rate))
		r.add(fmt.Sprintf("ratio_%d", n), fmt.Sprintf("%.2f", rate/one))
		r.add(fmt.Sprintf("cpu_us_per_cycle_%d", n), fmt.Sprintf("%.1f", us64(totals[n].cpuPer())))
		r.add(fmt.Sprintf("commits_per_cycle_%d", n), fmt.Sprintf("%.2f", totals[n].commitsPer()))
		r.add(fmt.Sprintf("transitions_per_commit_%d", n), fmt.Sprintf("%.2f", totals[n].transitionsPerCommit()))
		parts = append(parts, fmt.Sprintf("%d: %.0f/s (%.2f×)", n, rate, rate/one))
	}
	r.value = strings.Join(parts, ", ")
	r.goal = "3 instances ≥ 0.8× one"
	r.met = totals[3].rate() >= 0.8*one
	return []result{r}, nil
}

// instanceRound runs the wake cycle for b.cfg.cycleFor on n fresh servers.
func instanceRound(ctx context.Context, b *bench, n int, paths []string) (_ phase, err error) {
	in := newInbox("inst", paths)
	cl, err := startCluster(ctx, b, b.cfg.postgres, n, "inst", "/inst/*", paths, in.wake)
	if err != nil {
		return phase{}, err
	}
	defer func() { err = errors.Join(err, cl.close()) }()
	cycle := func(i int) error {
		path := paths[i]
		tail, err := cl.on(b, i).appendTo(ctx, path)
		if err != nil {
			return err
		}
		note, err := in.await(webhooks.ConsumerID("inst", path))
		if err != nil {
			return err
		}
		cl.callbackOn(note, i+1)
		cc := receiver.NewCallbackClient(note, b.hc)
		_, err = cc.Send(ctx, receiver.CallbackRequest{Acks: []webhooks.StreamOffset{{Path: path, Offset: tail}}, Done: true})
		return err
	}
	// Each goroutine of runFor plays one consumer, so cycles of one
	// consumer never overlap.
	return runFor(ctx, len(paths), b.cfg.cycleFor, func(i int) error { return cycle(i) })
}

// takeover measures how soon a surviving server acts on the deadlines of
// one that stopped: server A wakes K consumers whose webhooks hang, and
// stops with their attempts in flight in the Store; server B must fail each
// attempt at its WAKING timeout and send the retry (backoff zero). The
// figure is the time from each attempt's deadline to the retry reaching
// the receiver. It runs on the postgres Store only.
func takeover(ctx context.Context, b *bench) (_ []result, err error) {
	if b.store != "postgres" {
		return nil, nil
	}
	// Long enough for every first attempt to be in flight before the
	// first of them times out.
	const waking = 5 * time.Second
	k := b.capped(b.cfg.takeoverK)
	paths := streamNames("/tk/", k)
	var (
		mu      sync.Mutex
		first   = map[string]bool{}
		retried = map[string]time.Time{}
		hanging = make(chan struct{})
		arrived = make(chan struct{}, k)
		allIn   = make(chan struct{}, 1)
	)
	wake := func(n *receiver.Notification, at time.Time) bool {
		mu.Lock()
		if !first[n.ConsumerID] {
			first[n.ConsumerID] = true
			if len(first) == k {
				allIn <- struct{}{}
			}
			mu.Unlock()
			<-hanging // the first attempt hangs until A has stopped
			return false
		}
		if _, ok := retried[n.ConsumerID]; !ok {
			retried[n.ConsumerID] = at
			arrived <- struct{}{}
		}
		mu.Unlock()
		return true
	}
	opts := []webhooks.Option{
		webhooks.WithTimeouts(waking, 0, 0),
		webhooks.WithBackoff(func(int) time.Duration { return 0 }),
	}
	cl, err := startCluster(ctx, b, b.cfg.postgres, 2, "tk", "/tk/*", nil, wake, opts...)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, cl.close()) }()
	defer close(hanging)
	// Streams created through A wake their consumers there.
	if err := cl.on(b, 0).createStreams(ctx, k, func(i int) string { return paths[i] }); err != nil {
		return nil, err
	}
	select {
	case <-allIn:
	case <-time.After(waitFor):
		return nil, fmt.Errorf("not every consumer was woken within %v", waitFor)
	}
	// The deadlines are read before A stops: B may act on them soon after.
	deadlines, err := attemptDeadlines(ctx, cl.dsn, "tk", paths)
	if err != nil {
		return nil, err
	}
	// A stops with every first attempt in flight, abandoning them as a
	// crash would (its Stop's context has ended); B alone is left.
	stopCtx, cancel := context.WithCancel(ctx)
	cancel()
	err = cl.servers[0].Close(stopCtx)
	cl.servers[0] = nil
	if err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	for range k {
		select {
		case <-arrived:
		case <-time.After(waitFor + waking):
			return nil, errors.New("not every attempt was retried by the surviving server")
		}
	}
	var lags []time.Duration
	mu.Lock()
	for id, at := range retried {
		lags = append(lags, at.Sub(deadlines[id]))
	}
	mu.Unlock()
	slices.Sort(lags)
	s := summarize(lags)
	r := result{name: "takeover", label: fmt.Sprintf("survivor retries a stopped server's %d hung attempts", k)}
	r.add("k", k)
	s.addTo(&r, "lag_")
	r.value = fmt.Sprintf("after the WAKING deadline: p50 %v, p99 %v, max %v (poll interval %v)",
		s.p50.Round(time.Millisecond), s.p99.Round(time.Millisecond), s.max.Round(time.Millisecond), webhooks.DefaultPollInterval)
	r.goal = "within one WAKING timeout"
	r.met = s.max <= waking
	return []result{r}, nil
}

// attemptDeadlines reads the deadline of each consumer of sub, one per
// path.
func attemptDeadlines(ctx context.Context, dsn, sub string, paths []string) (map[string]time.Time, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	store, err := pgstore.New(ctx, pool)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(paths))
	for _, p := range paths {
		c, err := store.GetConsumer(ctx, webhooks.ConsumerID(sub, p))
		if err != nil {
			return nil, err
		}
		out[c.ID] = c.Deadline
	}
	return out, nil
}
