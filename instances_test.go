package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/pgstore"
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
			schema := pgSchema(t)
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

// pgDSN returns the test database's DSN. Without one the test skips,
// except under CI, where Postgres must be tested.
func pgDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("STREAMHOOKS_TEST_POSTGRES")
	if dsn == "" {
		msg := "STREAMHOOKS_TEST_POSTGRES is not set; set it to a PostgreSQL DSN to test engines sharing Postgres"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dsn
}

// pgSchema creates an empty schema, dropped when the test ends.
func pgSchema(t *testing.T) string {
	t.Helper()
	dsn := pgDSN(t)
	name := fmt.Sprintf("streamhooks_instances_%d", rand.Uint64())
	exec := func(sql string) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec("CREATE SCHEMA " + name)
	t.Cleanup(func() { exec("DROP SCHEMA " + name + " CASCADE") })
	return name
}

// pgPoolConfig is a small pool's configuration on schema.
func pgPoolConfig(t *testing.T, schema string) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgDSN(t))
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
	clock    *clock.Mock
	source   *fakeSource
	stores   []sharedStore
	engines  []*webhooks.Engine
	handlers []http.Handler
}

// newCluster creates an engine on each store; none is started.
func newCluster(t *testing.T, stores []sharedStore, opts ...webhooks.Option) *cluster {
	t.Helper()
	c := &cluster{t: t, clock: newMockClock(), source: newFakeSource(), stores: stores}
	for _, s := range stores {
		e, err := webhooks.New(s, c.source, append([]webhooks.Option{
			webhooks.WithClock(c.clock),
			webhooks.WithCallbackBaseURL(callbackBase),
			webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}),
			webhooks.WithPollInterval(testPollInterval),
		}, opts...)...)
		require.NoError(t, err)
		c.engines = append(c.engines, e)
		c.handlers = append(c.handlers, e.Handler(http.NotFoundHandler()))
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
func (c *cluster) callback(i int, id, token string, req webhooks.CallbackRequest) (int, webhooks.CallbackResponse, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return 0, webhooks.CallbackResponse{}, err
	}
	rec := c.do(i, http.MethodPost, "/callback/"+id, string(data), "Authorization", "Bearer "+token, "Content-Type", "application/json")
	var out webhooks.CallbackResponse
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
	n   webhooks.Notification
	ctx context.Context
}

// hookServer is a webhook endpoint that records every POST and answers
// as answer says. answer may block on the request's context.
type hookServer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	posts []webhooks.Notification
	seen  chan post
}

func newHookServer(t *testing.T, answer func(p post, w http.ResponseWriter)) *hookServer {
	h := &hookServer{seen: make(chan post, 4096)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var n webhooks.Notification
		if err := json.Unmarshal(body, &n); err != nil {
			t.Errorf("undecodable webhook body %q: %v", body, err)
			return
		}
		h.mu.Lock()
		h.posts = append(h.posts, n)
		h.mu.Unlock()
		p := post{n: n, ctx: r.Context()}
		h.seen <- p
		answer(p, w)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hookServer) url() string { return h.srv.URL + "/hook" }

func (h *hookServer) recorded() []webhooks.Notification {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]webhooks.Notification(nil), h.posts...)
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
func checkSafety(t *testing.T, posts []webhooks.Notification) map[cycle]int {
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
					var resp webhooks.CallbackResponse
					status, resp, err = c.callback(rand.IntN(engines), p.n.ConsumerID, p.n.Token, webhooks.CallbackRequest{
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
