package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// BenchmarkListConsumers measures ListConsumers pages of 100 over one
// subscription of 100,000 consumers, one in ten of them FAILED: the first
// page and a late one, with and without a state filter. A Store that
// answers from an index costs about the same for both.
func BenchmarkListConsumers(b *testing.B, s webhooks.Store) {
	const n, limit, workers = 100_000, 100, 32
	require.NoError(b, s.CreateSubscription(b.Context(), newSub("s")))
	// Many writers at once, so that a store which groups commits makes
	// few of them.
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				c := newConsumer("s", fmt.Sprintf("/tenants/%07d/events", i))
				if i%10 == 0 {
					c.State = webhooks.StateFailed
				}
				if err := s.CreateConsumer(b.Context(), c); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The tenths are FAILED, so the late page of them starts as late.
	late := webhooks.ConsumerID("s", fmt.Sprintf("/tenants/%07d/events", n-10*limit-10))
	for _, bc := range []struct {
		name  string
		state webhooks.ConsumerState
		after string
	}{
		{"first", "", ""},
		{"late", "", late},
		{"failed/first", webhooks.StateFailed, ""},
		{"failed/late", webhooks.StateFailed, late},
	} {
		b.Run("page="+bc.name, func(b *testing.B) {
			p := &webhooks.ListConsumersParams{SubscriptionID: "s", State: bc.state, After: bc.after, Limit: limit}
			b.ReportAllocs()
			for b.Loop() {
				cs, err := s.ListConsumers(b.Context(), p)
				if err != nil {
					b.Fatal(err)
				}
				if len(cs) != limit {
					b.Fatalf("got %d consumers, want %d", len(cs), limit)
				}
			}
		})
	}
}

// DSLinkCounts are the link counts BenchmarkDSCost measures at.
var DSLinkCounts = []int{10, 10_000, 100_000}

// BenchmarkDSCost measures the DSStore operations that must cost what they
// touch, not the number of a subscription's links, on one subscription
// with each of DSLinkCounts links: an ack (a heartbeat acking one stream),
// a link of a new stream, an append noted on a linked stream, and a wake
// started and ended (UpdateDSCursor, then AckDS with done). A Store that
// keeps per-link rows behind indexes costs about the same at every count.
// It skips a Store without webhooks.DSStore.
func BenchmarkDSCost(b *testing.B, s webhooks.Store) {
	d := dsStore(b, s)
	for _, n := range DSLinkCounts {
		id := fmt.Sprintf("s-%d", n)
		specs := make([]webhooks.DSLinkSpec, n)
		for i := range specs {
			specs[i] = glob(fmt.Sprintf("events/%d/%07d", n, i), 1)
		}
		// Linked in chunks, as an engine backfills a large pattern. Each
		// subscription has streams of its own, so that an append
		// concerns one.
		const chunk = 5_000
		mustPutDS(b, d, newDSSub(id), specs[:min(chunk, n)]...)
		for i := chunk; i < n; i += chunk {
			mustLink(b, d, id, specs[i:min(i+chunk, n)]...)
		}
		gen := startWake(b, d, id, "w1", time.Time{})
		// The streams touched are spread over the subscription's links.
		path := func(i int) string { return fmt.Sprintf("events/%d/%07d", n, (i*7919)%n) }
		b.Run(fmt.Sprintf("links=%d/op=ack", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if _, err := d.AckDS(b.Context(), &webhooks.AckDSParams{ID: id, Generation: gen, WakeID: "w1", Now: at(0),
					Acks: []webhooks.DSAck{{Path: path(i), Offset: off(1 + i)}}}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("links=%d/op=append", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if _, err := d.NoteDSAppend(b.Context(), &webhooks.NoteDSAppendParams{Path: path(i), Tail: off(1_000_000 + i), Now: at(0)}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("links=%d/op=link", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if err := d.LinkDSStreams(b.Context(), &webhooks.LinkDSStreamsParams{ID: id,
					Links: []webhooks.DSLinkSpec{glob(fmt.Sprintf("new/%d/%09d", n, i), 1)}}); err != nil {
					b.Fatal(err)
				}
			}
		})
		if _, err := d.ReleaseDS(b.Context(), &webhooks.ReleaseDSParams{ID: id, Generation: gen, WakeID: "w1", Now: at(0)}); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("links=%d/op=wake", n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				g := startWake(b, d, id, fmt.Sprintf("w-%d", i), time.Time{})
				if g == gen {
					b.Fatal("no new generation")
				}
				if _, err := d.AckDS(b.Context(), &webhooks.AckDSParams{ID: id, Generation: g, WakeID: fmt.Sprintf("w-%d", i), Now: at(0), Done: true,
					Acks: []webhooks.DSAck{{Path: path(i), Offset: off(2_000_000 + i)}}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDSCostRatio measures what BenchmarkDSCost does, for a shared
// machine: the link counts take turns, in rounds of batches, and each
// operation's fastest batch per count is kept, so that load that comes
// and goes weighs on every count alike. A batch touches dsRatioBatch
// distinct links, at every count the same work: the appends make idle
// links pending, the pages list the pending links as a wake does, the
// acks that follow ack the same links at their tails, which makes them
// idle again, and the links add new streams. The paths
// and offsets are made before a batch is timed. It reports, per
// operation, the fastest batch's time per call at each count (ns/ack@10,
// …) and the ratio of the largest count's to the smallest's (ack-ratio,
// …), which is about 1 for a Store whose calls cost what they touch.
func BenchmarkDSCostRatio(b *testing.B, s webhooks.Store) {
	d := dsStore(b, s)
	type sub struct {
		id   string
		n    int
		gen  int64
		next int // the first link of the next batch, in stride order
	}
	var subs []*sub
	for _, n := range DSLinkCounts {
		id := fmt.Sprintf("r-%d", n)
		specs := make([]webhooks.DSLinkSpec, n)
		for i := range specs {
			specs[i] = glob(fmt.Sprintf("events/%d/%07d", n, i), 1)
		}
		const chunk = 5_000
		mustPutDS(b, d, newDSSub(id), specs[:min(chunk, n)]...)
		for i := chunk; i < n; i += chunk {
			mustLink(b, d, id, specs[i:min(i+chunk, n)]...)
		}
		subs = append(subs, &sub{id: id, n: n, gen: startWake(b, d, id, "w1", time.Time{})})
	}
	// At most the smallest count, so that a batch's links are distinct.
	const batch = dsRatioBatch
	ops := []string{"append", "page", "ack", "link"}
	best := map[string]time.Duration{}
	seq := 1
	paths, offsets := make([]string, batch), make([]string, batch)
	for b.Loop() {
		for _, sb := range subs {
			// A stride prime to every count spreads the links touched.
			for j := range batch {
				paths[j] = fmt.Sprintf("events/%d/%07d", sb.n, ((sb.next+j)*7919)%sb.n)
				offsets[j] = off(1_000_000 + seq + j)
			}
			sb.next += batch
			seq += batch
			for _, op := range ops {
				if op == "link" {
					for j := range batch {
						paths[j] = fmt.Sprintf("new/%d/%09d", sb.n, seq+j)
					}
				}
				var err error
				start := time.Now()
				for j := range batch {
					switch op {
					case "append":
						_, err = d.NoteDSAppend(b.Context(), &webhooks.NoteDSAppendParams{Path: paths[j], Tail: offsets[j], Now: at(0)})
					case "page":
						var ls []webhooks.DSLink
						ls, err = d.ListDSLinks(b.Context(), &webhooks.ListDSLinksParams{ID: sb.id, Limit: 1000, PendingOnly: true})
						if err == nil && len(ls) != batch {
							err = fmt.Errorf("%d links pending, want %d", len(ls), batch)
						}
					case "ack":
						_, err = d.AckDS(b.Context(), &webhooks.AckDSParams{ID: sb.id, Generation: sb.gen, WakeID: "w1", Now: at(0),
							Acks: []webhooks.DSAck{{Path: paths[j], Offset: offsets[j]}}})
					case "link":
						err = d.LinkDSStreams(b.Context(), &webhooks.LinkDSStreamsParams{ID: sb.id,
							Links: []webhooks.DSLinkSpec{glob(paths[j], 1)}})
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				key := fmt.Sprintf("%s@%d", op, sb.n)
				if el := time.Since(start); best[key] == 0 || el < best[key] {
					best[key] = el
				}
			}
		}
	}
	lo, hi := DSLinkCounts[0], DSLinkCounts[len(DSLinkCounts)-1]
	for _, op := range ops {
		for _, n := range DSLinkCounts {
			b.ReportMetric(float64(best[fmt.Sprintf("%s@%d", op, n)].Nanoseconds())/batch, fmt.Sprintf("ns/%s@%d", op, n))
		}
		b.ReportMetric(float64(best[fmt.Sprintf("%s@%d", op, hi)])/float64(best[fmt.Sprintf("%s@%d", op, lo)]), op+"-ratio")
	}
	// The calls of one link's wake together: which of them first loads a
	// link that is not in the cache depends on their order.
	cycle := func(n int) time.Duration {
		return best[fmt.Sprintf("append@%d", n)] + best[fmt.Sprintf("page@%d", n)] + best[fmt.Sprintf("ack@%d", n)]
	}
	b.ReportMetric(float64(cycle(hi))/float64(cycle(lo)), "append+page+ack-ratio")
}

// dsRatioBatch is the calls of a batch of BenchmarkDSCostRatio: the
// smallest of DSLinkCounts, so that a batch touches distinct links.
const dsRatioBatch = 10
