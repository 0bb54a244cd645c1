package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/pgtest"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/pgstore"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// Benchmarks of the reserved __ds subscriptions through the engine, for
// issue 22's figures: the wake latency of a subscription linking 10, 10,000
// and 100,000 streams, and pull-wake cycles (claim → ack → release) over
// HTTP as a fraction of a bare handler's on the same server. Each runs on
// every Store (PostgreSQL if STREAMHOOKS_TEST_POSTGRES is set).
//
// The machine they run on is shared, so each keeps one subscription per
// link count in one engine, measures them in turns, in rounds of batches,
// and keeps each one's fastest batch: load that comes and goes weighs on
// every count alike, and the ratios compare like with like.

// dsBenchLinks are the link counts measured.
var dsBenchLinks = []int{10, 10_000, 100_000}

// dsBenchBatch is how many wakes or cycles a batch times.
const dsBenchBatch = 10

// dsBenchStore opens a fresh Store for a benchmark.
type dsBenchStore struct {
	name string
	open func(b *testing.B) webhooks.Store
}

func dsBenchStores() []dsBenchStore {
	return []dsBenchStore{
		{"memory", func(*testing.B) webhooks.Store { return memstore.New() }},
		{"sqlite", func(b *testing.B) webhooks.Store {
			s, err := sqlitestore.Open(filepath.Join(b.TempDir(), "hooks.db"))
			require.NoError(b, err)
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"postgres", func(b *testing.B) webhooks.Store {
			cfg, err := pgxpool.ParseConfig(pgtest.DSN(b))
			require.NoError(b, err)
			cfg.ConnConfig.RuntimeParams["search_path"] = pgtest.Schema(b)
			cfg.MaxConns = 4
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			require.NoError(b, err)
			b.Cleanup(pool.Close)
			s, err := pgstore.New(context.Background(), pool)
			require.NoError(b, err)
			return s
		}},
	}
}

// dsBenchSource is the fake source with the StreamAppender capability: an
// appended wake event is reported on its subscription's arrival channel.
type dsBenchSource struct {
	*fakeSource
	arrived map[string]chan struct{}
}

func (s *dsBenchSource) Append(ctx context.Context, path string, event []byte) error {
	if _, err := s.Stream(ctx, path); err != nil {
		return err
	}
	s.grow(path, 1)
	var ev struct {
		SubscriptionID string `json:"subscription_id"`
	}
	if err := json.Unmarshal(event, &ev); err != nil {
		return err
	}
	s.arrived[ev.SubscriptionID] <- struct{}{}
	return nil
}

// dsBenchSub is a subscription of a dsBench, linking n streams.
type dsBenchSub struct {
	id string
	n  int
}

// rel is the root-relative path of the i-th stream a benchmark touches;
// they are spread over the subscription's links.
func (s dsBenchSub) rel(i int) string { return fmt.Sprintf("%s/%07d", s.id, (i*7919)%s.n) }

// dsBench is an engine over a Store with one subscription of type typ per
// count of dsBenchLinks, each linking its own streams, set up through the
// Store as a backfill would leave them: idle, acked at their tails.
type dsBench struct {
	b        *testing.B
	typ      webhooks.DSType
	store    webhooks.DSStore
	src      *dsBenchSource
	engine   *webhooks.Engine
	progress chan struct{}
	subs     []dsBenchSub
}

func newDSBench(b *testing.B, store webhooks.Store, typ webhooks.DSType) *dsBench {
	b.Helper()
	ctx := context.Background()
	ds, ok := store.(webhooks.DSStore)
	require.True(b, ok, "%T is no DSStore", store)
	f := &dsBench{b: b, typ: typ, store: ds, progress: make(chan struct{}, 1),
		src: &dsBenchSource{fakeSource: newFakeSource(), arrived: map[string]chan struct{}{}}}
	// The webhook: every wake is answered done, so the engine acks its
	// snapshot and the subscription is idle again.
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var wake struct {
			SubscriptionID string `json:"subscription_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&wake); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.src.arrived[wake.SubscriptionID] <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"done":true}`)
	}))
	b.Cleanup(recv.Close)
	for _, n := range dsBenchLinks {
		s := dsBenchSub{id: fmt.Sprintf("n%d", n), n: n}
		f.subs = append(f.subs, s)
		f.src.arrived[s.id] = make(chan struct{}, 1)
		sub := &webhooks.DSSubscription{ID: s.id, Type: typ, Pattern: s.id + "/**", LeaseTTL: 30 * time.Second,
			ConfigHash: "bench-" + s.id, CreatedAt: testStart}
		if typ == webhooks.DSWebhook {
			sub.WebhookURL = recv.URL + "/" + s.id
		} else {
			sub.WakeStream = "wake/" + s.id
			f.src.set("/"+sub.WakeStream, 0)
		}
		specs := make([]webhooks.DSLinkSpec, n)
		for i := range specs {
			specs[i] = webhooks.DSLinkSpec{Path: fmt.Sprintf("%s/%07d", s.id, i), Type: webhooks.DSLinkGlob, Offset: offset(10)}
			f.src.set("/"+specs[i].Path, 10)
		}
		// In chunks, as an engine backfills a large pattern.
		const chunk = 5_000
		_, _, err := ds.PutDSSubscription(ctx, &webhooks.PutDSSubscriptionParams{Subscription: sub, Links: specs[:min(chunk, n)]})
		require.NoError(b, err)
		for i := chunk; i < n; i += chunk {
			require.NoError(b, ds.LinkDSStreams(ctx, &webhooks.LinkDSStreamsParams{ID: s.id, Links: specs[i:min(i+chunk, n)]}))
		}
	}
	e, err := webhooks.New(store, f.src, webhooks.WithClock(newMockClock()), webhooks.WithCallbackBaseURL(callbackBase),
		webhooks.WithWebhookPolicy(webhooks.WebhookPolicy{AllowLoopback: true}), webhooks.WithPollInterval(testPollInterval))
	require.NoError(b, err)
	webhooks.SignalDSProgress(e, f.progress)
	startForTest(b, e)
	f.engine = e
	return f
}

// cursor is subscription id's cursor.
func (f *dsBench) cursor(id string) webhooks.DSCursor {
	sub, err := f.store.GetDSSubscription(context.Background(), id)
	if err != nil {
		f.b.Fatal(err)
	}
	return sub.Cursor
}

// settle waits, on the engine's signals, until s has no wake in flight
// and no pending work. A pull-wake wake is acked done at the tail of the
// stream seq appended to, through the Store, as a worker would.
func (f *dsBench) settle(s dsBenchSub, seq int) {
	ctx := context.Background()
	for {
		c := f.cursor(s.id)
		if c.WakeID == "" && !c.Pending && c.DueAt.IsZero() {
			return
		}
		if f.typ == webhooks.DSPullWake && c.WakeID != "" {
			info, err := f.src.Stream(ctx, "/"+s.rel(seq))
			if err != nil {
				f.b.Fatal(err)
			}
			if _, err := f.store.AckDS(ctx, &webhooks.AckDSParams{ID: s.id, Generation: c.Generation, WakeID: c.WakeID,
				Acks: []webhooks.DSAck{{Path: s.rel(seq), Offset: info.Tail}}, Done: true, Now: testStart}); err != nil {
				f.b.Fatal(err)
			}
			continue
		}
		<-f.progress
	}
}

// rounds runs measure for each subscription in turn, once per b.Loop
// iteration, and keeps each one's fastest result.
func (f *dsBench) rounds(measure func(s dsBenchSub) time.Duration) map[int]time.Duration {
	best := map[int]time.Duration{}
	for f.b.Loop() {
		for _, s := range f.subs {
			if d := measure(s); best[s.n] == 0 || d < best[s.n] {
				best[s.n] = d
			}
		}
	}
	return best
}

// reportRatios reports best per count as unit@count, and the ratios of
// the larger counts' to the smallest's as name-ratio@count.
func reportRatios(b *testing.B, best map[int]time.Duration, unit, name string) {
	lo := dsBenchLinks[0]
	for _, n := range dsBenchLinks {
		b.ReportMetric(float64(best[n])/float64(time.Microsecond), fmt.Sprintf("%s@%d", unit, n))
		if n != lo {
			b.ReportMetric(float64(best[n])/float64(best[lo]), fmt.Sprintf("%s-ratio@%d", name, n))
		}
	}
}

// BenchmarkDSWakeLatency measures a wake through the engine: from an
// append to a linked stream (StreamAppended) to the webhook's POST
// received (mech=webhook) or the wake event appended to the wake stream
// (mech=pull-wake), for subscriptions linking each of dsBenchLinks
// streams. Between wakes the wake is acked done and the subscription is
// idle again (not timed). It reports the fastest batch's mean latency per
// count (us/wake@N) and its ratio to 10 links' (wake-ratio@N), which is
// about 1 if a wake costs what it touches.
func BenchmarkDSWakeLatency(b *testing.B) {
	for _, st := range dsBenchStores() {
		for _, typ := range []webhooks.DSType{webhooks.DSWebhook, webhooks.DSPullWake} {
			b.Run("store="+st.name+"/mech="+string(typ), func(b *testing.B) {
				f := newDSBench(b, st.open(b), typ)
				ctx := context.Background()
				seq := 0
				best := f.rounds(func(s dsBenchSub) time.Duration {
					var total time.Duration
					for range dsBenchBatch {
						seq++
						path := "/" + s.rel(seq)
						f.src.grow(path, 1)
						start := time.Now()
						if err := f.engine.StreamAppended(ctx, path); err != nil {
							b.Fatal(err)
						}
						<-f.src.arrived[s.id]
						total += time.Since(start)
						f.settle(s, seq)
					}
					return total / dsBenchBatch
				})
				reportRatios(b, best, "us/wake", "wake")
			})
		}
	}
}

// The JSON of a claim, an ack and a release, as a worker sends and reads
// them (upstream protocol section 7.2).
type (
	dsBenchClaim struct {
		Worker string `json:"worker"`
	}
	dsBenchClaimed struct {
		WakeID     string            `json:"wake_id"`
		Generation int64             `json:"generation"`
		Token      string            `json:"token"`
		Streams    []json.RawMessage `json:"streams"`
		LeaseTTLMS int64             `json:"lease_ttl_ms"`
	}
	dsBenchAck struct {
		WakeID     string             `json:"wake_id"`
		Generation int64              `json:"generation"`
		Acks       []dsBenchStreamAck `json:"acks,omitempty"`
	}
	dsBenchStreamAck struct {
		Stream string `json:"stream"`
		Offset string `json:"offset"`
	}
	dsBenchAcked struct {
		OK       bool `json:"ok"`
		NextWake bool `json:"next_wake"`
	}
)

// bareDSHandler is the ceiling of a pull-wake cycle: it decodes the same
// requests and encodes answers of the same shapes and sizes as the engine
// (a claim's token is one of the engine's), and does nothing else.
func bareDSHandler(token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var out any
		switch path.Base(r.URL.Path) {
		case "claim":
			var req dsBenchClaim
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			out = dsBenchClaimed{WakeID: "00000000-0000-0000-0000-000000000000", Generation: 1, Token: token,
				Streams: []json.RawMessage{}, LeaseTTLMS: 30_000}
		case "ack", "release":
			var req dsBenchAck
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("Authorization") == "" {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			if path.Base(r.URL.Path) == "release" {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			out = dsBenchAcked{OK: true}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}

// dsBenchClient sends a pull-wake worker's requests to one server.
type dsBenchClient struct {
	b      *testing.B
	client *http.Client
	base   string
}

// post sends body to base+path with token, requires status and decodes
// the answer into out, if set.
func (c *dsBenchClient) post(path, token string, body any, status int, out any) {
	data, err := json.Marshal(body)
	if err != nil {
		c.b.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, c.base+path, bytes.NewReader(data))
	if err != nil {
		c.b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		c.b.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.b.Fatal(err)
	}
	if resp.StatusCode != status {
		c.b.Fatalf("POST %s: %d %s", path, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.b.Fatal(err)
		}
	}
}

// cycle is one claim → ack → release of subscription id, acking stream
// rel at offset; it returns the time of the whole cycle and of its ack.
func (c *dsBenchClient) cycle(prefix, id, rel, offset string) (cycle, ack time.Duration) {
	start := time.Now()
	var claimed dsBenchClaimed
	c.post(prefix+id+"/claim", "", dsBenchClaim{Worker: "worker-1"}, http.StatusOK, &claimed)
	a := dsBenchAck{WakeID: claimed.WakeID, Generation: claimed.Generation, Acks: []dsBenchStreamAck{{Stream: rel, Offset: offset}}}
	ackStart := time.Now()
	c.post(prefix+id+"/ack", claimed.Token, a, http.StatusOK, &dsBenchAcked{})
	ack = time.Since(ackStart)
	c.post(prefix+id+"/release", claimed.Token, dsBenchAck{WakeID: claimed.WakeID, Generation: claimed.Generation}, http.StatusNoContent, nil)
	return time.Since(start), ack
}

// BenchmarkDSPullWakeCycle measures pull-wake cycles over HTTP: a claim,
// an ack of one linked stream (a heartbeat) and a release, each a round
// trip to the engine's Handler on a loopback server, for subscriptions
// linking each of dsBenchLinks streams. In the same rounds it measures the
// bare ceiling: the same three round trips, with the same bodies, to a
// handler on the same server that only decodes and encodes the JSON. It
// reports per count the fastest batch's cycles per second (cycles/s@N),
// its fraction of the ceiling's (of-bare@N), the mean time of its acks
// (us/ack@N) and the ratios of both to 10 links' (cycle-ratio@N,
// ack-ratio@N).
func BenchmarkDSPullWakeCycle(b *testing.B) {
	for _, st := range dsBenchStores() {
		b.Run("store="+st.name, func(b *testing.B) {
			f := newDSBench(b, st.open(b), webhooks.DSPullWake)
			engine := f.engine.Handler(http.NotFoundHandler())
			mux := http.NewServeMux()
			mux.Handle("/", engine)
			srv := httptest.NewServer(mux)
			b.Cleanup(srv.Close)
			c := &dsBenchClient{b: b, client: srv.Client(), base: srv.URL}
			// A claim's token, so that the bare handler's is as long.
			var claimed dsBenchClaimed
			c.post("/__ds/subscriptions/n10/claim", "", dsBenchClaim{Worker: "worker-0"}, http.StatusOK, &claimed)
			c.post("/__ds/subscriptions/n10/release", claimed.Token, dsBenchAck{WakeID: claimed.WakeID, Generation: claimed.Generation}, http.StatusNoContent, nil)
			mux.Handle("/bare/", bareDSHandler(claimed.Token))

			seq := 0
			bestBare, bestCycle, bestAck := time.Duration(0), map[int]time.Duration{}, map[int]time.Duration{}
			for b.Loop() {
				var bare time.Duration
				for range dsBenchBatch {
					seq++
					d, _ := c.cycle("/bare/subscriptions/", "n10", "n10/0000000", offset(10+seq))
					bare += d
				}
				if bestBare == 0 || bare < bestBare {
					bestBare = bare
				}
				for _, s := range f.subs {
					var cycle, ack time.Duration
					for range dsBenchBatch {
						seq++
						d, a := c.cycle("/__ds/subscriptions/", s.id, s.rel(seq), offset(10+seq))
						cycle += d
						ack += a
					}
					if bestCycle[s.n] == 0 || cycle < bestCycle[s.n] {
						bestCycle[s.n] = cycle
					}
					if bestAck[s.n] == 0 || ack < bestAck[s.n] {
						bestAck[s.n] = ack
					}
				}
			}
			b.ReportMetric(float64(dsBenchBatch)/bestBare.Seconds(), "cycles/s@bare")
			for _, n := range dsBenchLinks {
				b.ReportMetric(float64(dsBenchBatch)/bestCycle[n].Seconds(), fmt.Sprintf("cycles/s@%d", n))
				b.ReportMetric(float64(bestBare)/float64(bestCycle[n]), fmt.Sprintf("of-bare@%d", n))
			}
			for n, d := range bestAck {
				bestAck[n] = d / dsBenchBatch
			}
			reportRatios(b, bestAck, "us/ack", "ack")
			lo, hi := dsBenchLinks[0], dsBenchLinks[len(dsBenchLinks)-1]
			b.ReportMetric(float64(bestCycle[hi])/float64(bestCycle[lo]), fmt.Sprintf("cycle-ratio@%d", hi))
		})
	}
}
