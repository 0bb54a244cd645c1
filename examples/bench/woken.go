package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// wokenScale measures what cfg.wokenK consumers, capped, cost at rest after
// each has been woken once: heap and RSS each, as idleScale measures them
// before any wake. Each consumer is adopted IDLE, then woken by one append
// to its stream; the receiver answers {"done":true}, which acks the append
// and ends the cycle. The appends' own cost in the host's streams is
// measured on as many streams that no subscription matches, and taken off.
func wokenScale(ctx context.Context, b *bench) (_ []result, err error) {
	e, err := b.start(ctx, func(*receiver.Notification, time.Time) bool { return true })
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	k := b.capped(b.cfg.wokenK)
	woken := func(i int) string { return "/woken/" + strconv.Itoa(i) }
	control := func(i int) string { return "/control/" + strconv.Itoa(i) }
	appendAll := func(name func(int) string) error {
		return parallel(ctx, k, b.cfg.workers, func(i int) error {
			_, err := e.appendTo(ctx, name(i))
			return err
		})
	}

	if err := e.createStreams(ctx, k, woken); err != nil {
		return nil, err
	}
	if err := e.createStreams(ctx, k, control); err != nil {
		return nil, err
	}
	// Each measurement is taken with no connection kept alive: those are
	// the cost of the requests in flight, bounded by the engine's and the
	// program's limits whatever K is.
	quiesce := func() (uint64, int64, int) {
		e.b.hc.CloseIdleConnections()
		awaitGoroutines()
		return heapAfterGC(), rss(), runtime.NumGoroutine()
	}
	heap0, rss0, _ := quiesce()
	if err := appendAll(control); err != nil {
		return nil, err
	}
	heap1, rss1, _ := quiesce()
	if err := e.subscribe(ctx, "woken", "/woken/*"); err != nil {
		return nil, err
	}
	heap2, rss2, g2 := quiesce()

	start := time.Now()
	if err := appendAll(woken); err != nil {
		return nil, err
	}
	if err := awaitIdle(ctx, e, k); err != nil {
		return nil, err
	}
	took := time.Since(start)
	heapConns, rssConns := heapAfterGC(), rss()
	// The engine's webhook connections end when the receiver closes them.
	e.recv.srv.SetKeepAlivesEnabled(false)
	heap3, rss3, g3 := quiesce()
	if b.cfg.heapProfile != "" {
		if err := writeHeapProfile(b.cfg.heapProfile); err != nil {
			return nil, err
		}
	}

	// Per consumer: its cost at rest after the wake, the appends to the
	// host's streams taken off.
	appendHeap, appendRSS := int64(heap1)-int64(heap0), rss1-rss0
	idleHeap := bytesPer(int64(heap2)-int64(heap1), k)
	heapPer := bytesPer(int64(heap3)-int64(heap1)-appendHeap, k)
	rssPer := bytesPer(rss3-rss1-appendRSS, k)
	r := result{name: "woken_scale", label: "consumers at rest, woken once"}
	r.add("k", k)
	r.add("heap_bytes_per_consumer", int64(heapPer))
	r.add("rss_bytes_per_consumer", int64(rssPer))
	r.add("idle_heap_bytes_per_consumer", int64(idleHeap))
	r.add("idle_rss_bytes_per_consumer", int64(bytesPer(rss2-rss1, k)))
	r.add("with_conns_heap_bytes_per_consumer", int64(bytesPer(int64(heapConns)-int64(heap1)-appendHeap, k)))
	r.add("with_conns_rss_bytes_per_consumer", int64(bytesPer(rssConns-rss1-appendRSS, k)))
	r.add("append_heap_bytes", int64(bytesPer(appendHeap, k)))
	r.add("wakes_ms", took.Milliseconds())
	r.add("goroutines_before", g2)
	r.add("goroutines_after", g3)
	r.value = fmt.Sprintf("K=%d: heap %.0f B, RSS %.0f B each (%.0f B heap before the wake); woken in %v; goroutines %d → %d",
		k, heapPer, rssPer, idleHeap, round(took), g2, g3)
	r.goal = "≤ 1 KiB each"
	r.met = heapPer <= 1024 && rssPer <= 1024 && g3-g2 < 8
	return []result{r}, nil
}

// awaitGoroutines waits, for a second at most, until the number of
// goroutines stops falling: those of closed connections take a moment to
// end.
func awaitGoroutines() {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n {
			return
		}
		n = m
	}
}

// awaitIdle waits until the Store's k consumers are all IDLE again.
func awaitIdle(ctx context.Context, e *env, k int) error {
	deadline := time.Now().Add(waitFor + time.Duration(k)*time.Millisecond)
	for {
		counts, err := e.store.CountConsumers(ctx)
		if err != nil {
			return err
		}
		if counts[webhooks.StateIdle] == k {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d consumers IDLE after their wake: %v", counts[webhooks.StateIdle], k, counts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeHeapProfile writes the live heap as of the last GC to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.WriteHeapProfile(f), f.Close())
}
