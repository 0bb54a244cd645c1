package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/mockclock"
	"github.com/streamhooks/webhooks/internal/pgtest"
	"github.com/streamhooks/webhooks/pgstore"
	"github.com/streamhooks/webhooks/receiver"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// Several engines sharing one Store, in one process: each engine has a
// Store handle of its own on one database, as engines on several hosts
// would, and all see one fakeSource, as streams kept in a shared database.

// sharedStore is one engine's handle on the shared database.
type sharedStore struct {
	webhooks.Store
	// close closes the handle, as a crash would, without waiting for the
	// engine; it is idempotent and runs when the test ends too.
	close func()
}

// instanceBackend opens n handles on one fresh database.
type instanceBackend struct {
	name string
	open func(t *testing.T, n int) []sharedStore
}

func instanceBackends() []instanceBackend {
	return []instanceBackend{
		{"sqlite", func(t *testing.T, n int) []sharedStore {
			path := filepath.Join(t.TempDir(), "hooks.db")
			out := make([]sharedStore, n)
			for i := range out {
				s, err := sqlitestore.Open(path)
				require.NoError(t, err)
				out[i] = sharedStore{s, closeOnce(t, func() { _ = s.Close() })}
			}
			return out
		}},
		{"postgres", func(t *testing.T, n int) []sharedStore {
			schema := pgtest.Schema(t)
			out := make([]sharedStore, n)
			for i := range out {
				out[i] = pgHandle(t, pgPoolConfig(t, schema))
			}
			return out
		}},
	}
}

// forEachBackend runs fn for each backend, as a subtest.
func forEachBackend(t *testing.T, fn func(t *testing.T, b instanceBackend)) {
	for _, b := range instanceBackends() {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

func closeOnce(t *testing.T, fn func()) func() {
	once := sync.OnceFunc(fn)
	t.Cleanup(once)
	return once
}

// pgPoolConfig is a small pool's configuration on schema.
func pgPoolConfig(t *testing.T, schema string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 4
	return cfg
}

// pgHandle opens a pgstore on a pool of its own.
func pgHandle(t *testing.T, cfg *pgxpool.Config) sharedStore {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	closePool := closeOnce(t, pool.Close)
	s, err := pgstore.New(context.Background(), pool)
	require.NoError(t, err)
	return sharedStore{s, closePool}
}

// cluster is several engines on one mock clock, one source, and handles
// on one database.
type cluster struct {
	t        *testing.T
	clock    *mockclock.Clock
	source   *fakeSource
	stores   []sharedStore
	engines  []*webhooks.Engine
	handlers []http.Handler
	// progressed is signalled by every engine's progress (SignalProgress).
	progressed chan struct{}
}

// newCluster creates an engine on each store; none is started.
func newCluster(t *testing.T, stores []sharedStore, opts ...webhooks.Option) *cluster {
	t.Helper()
	c := &cluster{t: t, clock: newMockClock(), source: newFakeSource(), stores: stores, progressed: make(chan struct{}, 1)}
	for _, s := range stores {
		// The handle itself, not the wrapper, whose embedding would hide
		// the optional capabilities (SubscriptionFeed, Leaser, …).
		e, err := webhooks.New(s.Store, c.source, append([]webhooks.Option{
			webhooks.WithClock(c.clock),
			webhooks.WithCallbackBaseURL(callbackBase),
			webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
			webhooks.WithPollInterval(testPollInterval),
		}, opts...)...)
		require.NoError(t, err)
		webhooks.SignalProgress(e, c.progressed)
		c.engines = append(c.engines, e)
		c.handlers = append(c.handlers, apiHandler(t, e))
	}
	return c
}

// start starts engine i, stopped when the test ends.
func (c *cluster) start(i int) { startForTest(c.t, c.engines[i]) }

// crash stops engine i as a crash would: its deliveries in flight are
// abandoned, nothing of it waits, and its Store handle is closed.
func (c *cluster) crash(i int) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.engines[i].Stop(cancelled)
	c.stores[i].close()
}

// stepTo moves the clock to t a second at a time, and after each step
// waits for engine i to act on it: its scheduler parked and no delivery
// running. Moved on at once, the clock could pass a POST's timeouts while
// a slow Store still sends it, and cancel it before it arrives.
func (c *cluster) stepTo(i int, t time.Time) {
	c.t.Helper()
	for c.clock.Now().Before(t) {
		c.clock.Add(min(time.Second, t.Sub(c.clock.Now())))
		timeout := time.After(waitFor)
		for !webhooks.SchedulerParked(c.engines[i]) || webhooks.DeliveriesRunning(c.engines[i]) > 0 {
			select {
			case <-c.progressed:
			case <-timeout:
				c.t.Fatalf("engine %d did not settle at %v", i, c.clock.Now())
			}
		}
	}
}

// do sends a request to engine i's handler.
func (c *cluster) do(i int, method, target, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	for j := 0; j+1 < len(header); j += 2 {
		req.Header.Set(header[j], header[j+1])
	}
	rec := httptest.NewRecorder()
	c.handlers[i].ServeHTTP(rec, req)
	return rec
}

// subscribe creates subscription id on pattern to webhook through engine i.
func (c *cluster) subscribe(i int, id, pattern, webhook string) {
	c.t.Helper()
	rec := c.do(i, http.MethodPut, pattern+"?subscription="+id, fmt.Sprintf(`{"webhook":%q}`, webhook))
	require.Equal(c.t, http.StatusCreated, rec.Code, rec.Body.String())
}

// callback sends a callback for consumer id to engine i. It is safe to
// call from any goroutine.
func (c *cluster) callback(i int, id, token string, req receiver.CallbackRequest) (int, receiver.CallbackResponse, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return 0, receiver.CallbackResponse{}, err
	}
	rec := c.do(i, http.MethodPost, "/callback/"+id, string(data), "Authorization", "Bearer "+token, "Content-Type", "application/json")
	var out receiver.CallbackResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		return rec.Code, out, fmt.Errorf("callback answer %q: %w", rec.Body.String(), err)
	}
	return rec.Code, out, nil
}

// consumer reads consumer id through handle i.
func (c *cluster) consumer(i int, id string) *webhooks.Consumer {
	c.t.Helper()
	got, err := c.stores[i].GetConsumer(context.Background(), id)
	require.NoError(c.t, err)
	return got
}

// waitConsumer waits until consumer id, read through handle i, satisfies
// cond.
func (c *cluster) waitConsumer(i int, id string, cond func(*webhooks.Consumer) bool) *webhooks.Consumer {
	c.t.Helper()
	got, err := c.await(i, id, cond)
	require.NoError(c.t, err)
	return got
}

// await is waitConsumer that returns an error rather than fail the test.
func (c *cluster) await(i int, id string, cond func(*webhooks.Consumer) bool) (*webhooks.Consumer, error) {
	var (
		last *webhooks.Consumer
		err  error
	)
	for end := time.Now().Add(waitFor); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if last, err = c.stores[i].GetConsumer(context.Background(), id); err == nil && cond(last) {
			return last, nil
		}
	}
	return nil, fmt.Errorf("consumer %s never reached the expected state; last: %+v, %v", id, last, err)
}

// post is one webhook POST as a receiver saw it.
type post struct {
	n   receiver.Notification
	ctx context.Context
}

// hookServer is a webhook endpoint that records every POST and answers
// as answer says. answer may block on the request's context.
type hookServer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	posts []receiver.Notification
	seen  chan post
}

func newHookServer(t *testing.T, answer func(p post, w http.ResponseWriter)) *hookServer {
	h := &hookServer{seen: make(chan post, 4096)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var n receiver.Notification
		if err := json.Unmarshal(body, &n); err != nil {
			t.Errorf("undecodable webhook body %q: %v", body, err)
			return
		}
		h.mu.Lock()
		h.posts = append(h.posts, n)
		h.mu.Unlock()
		p := post{n: n, ctx: r.Context()}
		select {
		case h.seen <- p:
		default: // recorded all the same; a test that reads seen reads few
		}
		answer(p, w)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookServer) url() string { return h.srv.URL + "/hook" }

func (h *hookServer) recorded() []receiver.Notification {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]receiver.Notification(nil), h.posts...)
}

// next waits for the next POST.
func (h *hookServer) next(t *testing.T) post {
	t.Helper()
	select {
	case p := <-h.seen:
		return p
	case <-time.After(waitFor):
		t.Fatal("no webhook POST arrived")
		return post{}
	}
}

// cycle is one wake cycle of one consumer.
type cycle struct {
	consumer string
	epoch    int64
}

// checkSafety checks the spec's safety invariants over every POST the
// receiver recorded, whichever engine sent it: a consumer's epochs never go
// back, so at most one wake cycle is live (S1), and every POST of a cycle
// carries the wake_id of that cycle, which no other cycle has (S2). It
// returns how many POSTs each cycle got: the attempts, as a notification
// does not number them.
func checkSafety(t *testing.T, posts []receiver.Notification) map[cycle]int {
	t.Helper()
	count := map[cycle]int{}
	wakeIDs := map[cycle]string{}
	owners := map[string]cycle{}
	latest := map[string]int64{}
	for _, n := range posts {
		require.GreaterOrEqual(t, n.Epoch, latest[n.ConsumerID], "%s: epoch %d delivered after epoch %d", n.ConsumerID, n.Epoch, latest[n.ConsumerID])
		latest[n.ConsumerID] = n.Epoch
		k := cycle{n.ConsumerID, n.Epoch}
		count[k]++
		if w, ok := wakeIDs[k]; ok {
			require.Equal(t, w, n.WakeID, "%s: epoch %d changed its wake_id", n.ConsumerID, n.Epoch)
			continue
		}
		other, reused := owners[n.WakeID]
		require.False(t, reused, "wake_id %s of %v is that of %v too", n.WakeID, k, other)
		wakeIDs[k], owners[n.WakeID] = n.WakeID, k
	}
	return count
}

// The load test: engines share a Store, appends land on any of them, and
// the consumer acks through any of them. Each wake cycle gets exactly one
// POST, with every POST 2xx and the clock still, and every consumer ends
// IDLE at its tail.
func TestInstancesDeliverEachAttemptOnce(t *testing.T) {
	const (
		engines   = 3
		streams   = 8
		appenders = 4
		appends   = 60
	)
	forEachBackend(t, func(t *testing.T, b instanceBackend) {
		// A zero backoff turns any attempt wrongly failed, as one a second
		// engine took for timed out, into a second POST at once.
		c := newCluster(t, b.open(t, engines), webhooks.WithBackoff(func(int) time.Duration { return 0 }))
		var (
			acks    sync.WaitGroup
			errMu   sync.Mutex
			ackErrs []error
		)
		hooks := newHookServer(t, func(p post, w http.ResponseWriter) {
			w.WriteHeader(http.StatusOK)
			acks.Add(1)
			go func() {
				defer acks.Done()
				// Ack all there is and finish, through any engine.
				tail, err := c.source.Stream(context.Background(), p.n.PrimaryStream)
				if err == nil {
					var status int
					var resp receiver.CallbackResponse
					status, resp, err = c.callback(rand.IntN(engines), p.n.ConsumerID, p.n.Token, receiver.CallbackRequest{
						Epoch: epoch(p.n.Epoch), WakeID: p.n.WakeID, Acks: streamOffsets(p.n.PrimaryStream, tail.Tail), Done: true,
					})
					if err == nil && status != http.StatusOK {
						err = fmt.Errorf("callback of %s epoch %d: %d %+v", p.n.ConsumerID, p.n.Epoch, status, resp.Error)
					}
				}
				if err != nil {
					errMu.Lock()
					ackErrs = append(ackErrs, err)
					errMu.Unlock()
				}
			}()
		})
		c.start(0)
		c.subscribe(0, "s1", "/load/*", hooks.url())
		for i := 1; i < engines; i++ {
			c.start(i)
		}
		paths := make([]string, streams)
		for i := range paths {
			paths[i] = fmt.Sprintf("/load/%d", i)
			c.source.set(paths[i], 1)
			require.NoError(t, c.engines[i%engines].StreamCreated(context.Background(), paths[i]))
		}

		var load sync.WaitGroup
		for range appenders {
			load.Go(func() {
				for range appends {
					p := paths[rand.IntN(streams)]
					c.source.grow(p, 1+rand.IntN(3))
					if err := c.engines[rand.IntN(engines)].StreamAppended(context.Background(), p); err != nil {
						t.Errorf("StreamAppended(%s): %v", p, err)
					}
				}
			})
		}
		load.Wait()

		var stuck []error
		for _, p := range paths {
			tail, err := c.source.Stream(context.Background(), p)
			require.NoError(t, err)
			_, err = c.await(0, webhooks.ConsumerID("s1", p), func(cs *webhooks.Consumer) bool {
				return cs.State == webhooks.StateIdle && cs.Streams[0].Offset == tail.Tail
			})
			stuck = append(stuck, err)
		}
		// Safety first: a broken invariant is the likelier cause of a
		// consumer that is stuck.
		posts := hooks.recorded()
		counts := checkSafety(t, posts)
		for k, n := range counts {
			require.Equal(t, 1, n, "%s: epoch %d got %d POSTs: its one attempt was sent more than once", k.consumer, k.epoch, n)
		}
		require.NoError(t, errors.Join(stuck...), "every consumer ends IDLE at its tail")
		acks.Wait()
		require.Empty(t, ackErrs)
		require.Greater(t, len(posts), streams, "the appends woke consumers again")
		for _, p := range paths {
			c := c.consumer(0, webhooks.ConsumerID("s1", p))
			for e := int64(1); e <= c.Epoch; e++ {
				require.Contains(t, counts, cycle{c.ID, e}, "every cycle of %s got its POST", c.ID)
			}
		}
	})
}

// Callbacks of one LIVE consumer arriving at once at different engines
// apply one after another: each ack moves the offset from what the one
// before stored, so the offset ends at the greatest ack, whatever order
// they ran in.
func TestInstancesSerializeConcurrentCallbacks(t *testing.T) {
	const (
		tail  = 64
		acks  = 64
		round = 3
	)
	forEachBackend(t, func(t *testing.T, b instanceBackend) {
		c := newCluster(t, b.open(t, 2))
		hooks := newHookServer(t, func(_ post, w http.ResponseWriter) { w.WriteHeader(http.StatusOK) })
		c.start(0)
		c.subscribe(0, "s1", "/agents/*", hooks.url())
		c.start(1)
		c.source.set(agentA, tail)
		require.NoError(t, c.engines[0].StreamCreated(context.Background(), agentA))
		n := hooks.next(t).n
		status, _, err := c.callback(1, agentAID, n.Token, receiver.CallbackRequest{Epoch: epoch(n.Epoch), WakeID: n.WakeID})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, "the claim")

		highest := 0
		for r := range round {
			// Each round acks a permutation of a higher range, so a lost
			// update can leave the offset anywhere below the top.
			offsets := rand.Perm(acks / round)
			var wg sync.WaitGroup
			for i, k := range offsets {
				at := 1 + r*(acks/round) + k
				highest = max(highest, at)
				wg.Go(func() {
					status, resp, err := c.callback(i%2, agentAID, n.Token, receiver.CallbackRequest{
						Epoch: epoch(n.Epoch), Acks: streamOffsets(agentA, offset(at)),
					})
					if err != nil || status != http.StatusOK {
						t.Errorf("ack of %d: %d %+v %v", at, status, resp.Error, err)
						return
					}
					if got := resp.Streams[0].Offset; got < offset(at) {
						t.Errorf("ack of %d answered offset %s: its own ack is not in what it stored", at, got)
					}
				})
			}
			wg.Wait()
			for i := range c.stores {
				got := c.consumer(i, agentAID)
				require.Equal(t, webhooks.StateLive, got.State)
				require.Equal(t, offset(highest), got.Streams[0].Offset, "round %d: the stored offset is the greatest ack", r)
			}
		}
	})
}

// An engine that dies leaves WAKING, LIVE and retrying consumers, whose
// deadlines are in the Store. Another engine on the Store, which no
// transition of the dead one woke, finds each within its timeout plus the
// poll interval: it fails the attempt that got no answer and retries it
// with the same wake_id, retries the failed one, and ends the silent LIVE
// cycle and wakes the consumer again from its acked offset.
func TestInstancesTakeOverDeadlines(t *testing.T) {
	const (
		waking   = 10 * time.Second
		liveness = 45 * time.Second
		backoff  = 20 * time.Second
		poll     = 5 * time.Second
	)
	var (
		hang  = "/agents/hang"
		live  = "/agents/live"
		retry = "/agents/retry"
	)
	forEachBackend(t, func(t *testing.T, b instanceBackend) {
		c := newCluster(t, b.open(t, 2),
			webhooks.WithTimeouts(waking, liveness, 0),
			webhooks.WithBackoff(func(int) time.Duration { return backoff }),
			webhooks.WithPollInterval(poll))
		var (
			mu    sync.Mutex
			posts = map[string]int{}
		)
		hooks := newHookServer(t, func(p post, w http.ResponseWriter) {
			mu.Lock()
			posts[p.n.PrimaryStream]++
			firstPost := posts[p.n.PrimaryStream] == 1
			mu.Unlock()
			switch {
			case firstPost && p.n.PrimaryStream == hang:
				// No answer while its engine lives.
				<-p.ctx.Done()
			case firstPost && p.n.PrimaryStream == retry:
				w.WriteHeader(http.StatusInternalServerError)
			default:
				w.WriteHeader(http.StatusOK)
			}
		})
		// B starts first, so that no start-up sweep of its own shows it
		// A's consumers: it learns of them only through the Store's
		// deadlines. Its scheduler sleeps a poll interval, as nothing is
		// due.
		c.start(1)
		c.start(0)
		c.subscribe(0, "s1", "/agents/*", hooks.url())
		t0 := c.clock.Now()
		for _, p := range []string{hang, live, retry} {
			c.source.set(p, 10)
			require.NoError(t, c.engines[0].StreamCreated(context.Background(), p))
		}
		first := map[string]receiver.Notification{}
		for range 3 {
			n := hooks.next(t).n
			first[n.PrimaryStream] = n
		}
		liveID := webhooks.ConsumerID("s1", live)
		status, _, err := c.callback(0, liveID, first[live].Token, receiver.CallbackRequest{
			Epoch: epoch(1), WakeID: first[live].WakeID, Acks: streamOffsets(live, offset(5)),
		})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
		c.waitConsumer(1, webhooks.ConsumerID("s1", retry), func(cs *webhooks.Consumer) bool {
			return cs.Failures == 1 && !cs.InFlight && cs.Deadline.Equal(t0.Add(backoff))
		})
		hangID := webhooks.ConsumerID("s1", hang)
		require.True(t, c.consumer(1, hangID).InFlight)
		require.Equal(t, t0.Add(liveness), c.consumer(1, liveID).Deadline)

		c.crash(0)

		// The POST that got no answer: failed at its WAKING timeout.
		c.stepTo(1, t0.Add(waking+poll))
		c.waitConsumer(1, hangID, func(cs *webhooks.Consumer) bool {
			return cs.State == webhooks.StateWaking && cs.Failures == 1 && !cs.InFlight
		})
		// The failed attempt: retried at its backoff, in its cycle.
		c.stepTo(1, t0.Add(backoff+poll))
		p := hooks.next(t).n
		require.Equal(t, retry, p.PrimaryStream)
		require.Equal(t, first[retry].WakeID, p.WakeID, "a retry keeps its cycle's wake_id (S2)")
		// The silent LIVE cycle: ended at its liveness timeout, and the
		// consumer woken again from the offset it acked.
		c.stepTo(1, t0.Add(liveness+poll))
		var again, hangRetry receiver.Notification
		for again.ConsumerID == "" || hangRetry.ConsumerID == "" {
			switch n := hooks.next(t).n; n.PrimaryStream {
			case live:
				again = n
			case hang:
				hangRetry = n
			}
		}
		require.Equal(t, int64(2), again.Epoch)
		require.Equal(t, streamOffsets(live, offset(5)), again.Streams, "the acked offset survives the takeover")
		require.Equal(t, first[hang].WakeID, hangRetry.WakeID, "the abandoned POST is retried in its cycle (S2)")
		require.Equal(t, int64(1), hangRetry.Epoch)

		counts := checkSafety(t, hooks.recorded())
		for id, want := range map[string]int{hangID: 2, liveID: 1} {
			got := c.waitConsumer(1, id, func(cs *webhooks.Consumer) bool { return cs.State == webhooks.StateLive })
			require.Equal(t, want, counts[cycle{id, got.Epoch}], "%s: one POST per attempt", id)
			require.Equal(t, want, got.Attempt, "%s: one POST per attempt", id)
		}
		require.Equal(t, offset(5), c.consumer(1, liveID).Streams[0].Offset)
	})
}

// tcpProxy forwards TCP connections to target until cut, which drops every
// connection and refuses new ones, as a network partition from the
// database would; restore lets connections through again.
type tcpProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) addr() *net.TCPAddr { return p.ln.Addr().(*net.TCPAddr) }

func (p *tcpProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.forward(client) })
	}
}

func (p *tcpProxy) forward(client net.Conn) {
	defer client.Close()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

// track records c, unless the proxy is cut.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// logCounter counts the engine's log records by message.
type logCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (l *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logCounter) WithGroup(string) slog.Handler            { return l }
func (l *logCounter) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[r.Message]++
	return nil
}

func (l *logCounter) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[msg]
}

// requireUnavailable checks an API answer is the outage's 503.
func requireUnavailable(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.Equal(t, "1", rec.Header().Get("Retry-After"))
	var body receiver.CallbackResponse
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	require.NotNil(t, body.Error, rec.Body.String())
	require.Equal(t, receiver.ErrorCode("SERVICE_UNAVAILABLE"), body.Error.Code)
	require.Contains(t, body.Error.Message, "cannot reach its store")
	for _, internal := range []string{"pgstore", "dial", "EOF", "connect", "127.0.0.1"} {
		require.NotContains(t, rec.Body.String(), internal, "internal error text reaches the client")
	}
}

// While Postgres cannot be reached, the APIs answer 503 with Retry-After,
// StreamAppended fails, and the scheduler retries once per storeErrorRetry
// (a second) and logs as often. Once it can be reached again, nothing is
// lost: the append that failed during the outage wakes its consumer, and
// the APIs answer 2xx.
func TestInstancesStoreUnreachable(t *testing.T) {
	cfg := pgPoolConfig(t, pgtest.Schema(t))
	if strings.HasPrefix(cfg.ConnConfig.Host, "/") {
		t.Skip("the proxy needs Postgres on TCP")
	}
	proxy := newTCPProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(proxy.addr().Port)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.ConnectTimeout = time.Second
	logs := &logCounter{counts: map[string]int{}}
	clk := &pollClock{Clock: newMockClock(), armed: make(chan time.Time, 64)}
	const poll = 10 * time.Second
	c := newCluster(t, []sharedStore{pgHandle(t, cfg)},
		webhooks.WithClock(clk), webhooks.WithLogger(slog.New(logs)), webhooks.WithPollInterval(poll))
	c.clock = clk.Clock
	const (
		busy = "/agents/busy" // LIVE through the outage
		idle = "/agents/idle" // IDLE, and appended to in the outage
	)
	hooks := newHookServer(t, func(p post, w http.ResponseWriter) {
		w.WriteHeader(http.StatusOK)
		if p.n.PrimaryStream == idle {
			_, _ = io.WriteString(w, `{"done":true}`)
		}
	})
	c.start(0)
	c.subscribe(0, "s1", "/agents/*", hooks.url())
	c.source.set(busy, 10)
	c.source.set(idle, 10)
	require.NoError(t, c.engines[0].StreamCreated(context.Background(), busy))
	require.NoError(t, c.engines[0].StreamCreated(context.Background(), idle))
	var woke receiver.Notification
	for woke.PrimaryStream != busy {
		woke = hooks.next(t).n
	}
	busyID, idleID := woke.ConsumerID, webhooks.ConsumerID("s1", idle)
	ack := func(at int) *httptest.ResponseRecorder {
		body := fmt.Sprintf(`{"epoch":%d,"acks":[{"path":%q,"offset":%q}]}`, woke.Epoch, busy, offset(at))
		return c.do(0, http.MethodPost, "/callback/"+busyID, body, "Authorization", "Bearer "+woke.Token)
	}
	require.Equal(t, http.StatusOK, ack(5).Code)
	c.waitConsumer(0, idleID, func(cs *webhooks.Consumer) bool {
		return cs.State == webhooks.StateIdle && cs.Streams[0].Offset == offset(10)
	})
	drain := func() {
		for len(clk.armed) > 0 {
			<-clk.armed
		}
	}

	proxy.cut()
	drain()
	requireUnavailable(t, c.do(0, http.MethodPut, "/other/*?subscription=s2", fmt.Sprintf(`{"webhook":%q}`, hooks.url())))
	requireUnavailable(t, c.do(0, http.MethodGet, "/**?subscriptions", ""))
	requireUnavailable(t, ack(7))
	c.source.grow(idle, 5)
	require.ErrorIs(t, c.engines[0].StreamAppended(context.Background(), idle), webhooks.ErrStoreUnavailable)

	// The scheduler finds the outage at its poll, if not before, and then
	// fails once a second, not in a loop.
	const seconds = 4
	start := c.clock.Now()
	for i := range seconds {
		c.clock.Add(time.Second)
		if i == 0 {
			c.clock.Add(poll - time.Second)
		}
		want := c.clock.Now().Add(time.Second)
		for armed := false; !armed; {
			select {
			case at := <-clk.armed:
				// Earlier times are of failures before the clock's last
				// move, which the scheduler is still catching up with.
				require.False(t, at.After(want), "after a Store error the scheduler waits a second, armed for %v", at)
				armed = at.Equal(want)
			case <-time.After(waitFor):
				t.Fatal("the scheduler armed no timer a second after a Store error")
			}
		}
	}
	logged := logs.count("webhooks: listing due consumers") + logs.count("webhooks: retrying stream events missed in a Store outage")
	require.Positive(t, logged, "the scheduler's errors are logged")
	require.LessOrEqual(t, logged, int(c.clock.Since(start)/time.Second)+1, "at most once a second")

	proxy.restore()
	c.clock.Add(time.Second)
	n := hooks.next(t).n
	for n.PrimaryStream != idle || n.Epoch == 1 { // the POSTs before the outage
		n = hooks.next(t).n
	}
	require.Equal(t, int64(2), n.Epoch, "the append the outage failed wakes its consumer")
	require.Equal(t, streamOffsets(idle, offset(10)), n.Streams)
	c.waitConsumer(0, idleID, func(cs *webhooks.Consumer) bool {
		return cs.State == webhooks.StateIdle && cs.Streams[0].Offset == offset(15)
	})
	require.Equal(t, http.StatusOK, ack(7).Code, "callbacks work again")
	require.Equal(t, offset(7), c.consumer(0, busyID).Streams[0].Offset, "no ack is lost")
	require.Equal(t, webhooks.StateLive, c.consumer(0, busyID).State)
	rec := c.do(0, http.MethodPut, "/other/*?subscription=s2", fmt.Sprintf(`{"webhook":%q}`, hooks.url()))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
}
