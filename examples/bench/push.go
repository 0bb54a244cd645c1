package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// Event-push figures: the latency from an append to its POST, the rate of
// events pushed to a receiver that answers 2xx at batch sizes 1 and 100
// against the bare POST ceiling, and what consumers cost while their
// receiver hangs.

// pushLatency measures how long after an append the batch carrying it
// arrives, at max_wait_ms 0, with cfg.idle idle push consumers, capped, in
// the Store.
func pushLatency(ctx context.Context, b *bench) (_ []result, err error) {
	idle := b.capped(b.cfg.idle)
	arrivals := make(chan arrival, 1024)
	e, err := b.startPush(ctx, nil, func(p *receiver.EventsPayload, at time.Time) bool {
		select {
		case arrivals <- arrival{id: webhooks.ConsumerID(p.SubscriptionID, p.Stream), at: at}:
		default:
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	const fields = `"batch":{"max_wait_ms":0}`
	// Streams first, so that no subscription sends their creation.
	if err := e.createStreams(ctx, idle, func(i int) string { return "/idle/" + strconv.Itoa(i) }); err != nil {
		return nil, err
	}
	if err := e.subscribePush(ctx, "idle", "/idle/*", fields); err != nil {
		return nil, err
	}
	hot, err := e.createHotStreams(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.subscribePush(ctx, "lat", "/lat/*", fields); err != nil {
		return nil, err
	}
	p := &prober{e: e, targets: hot, arrivals: arrivals}
	if err := probeAll(ctx, b.cfg.samples, p); err != nil {
		return nil, err
	}
	l := summarize(p.fromSend)
	r := result{name: "push_latency", label: "append to POST, event push"}
	r.add("idle", idle)
	r.add("samples", l.n)
	l.addTo(&r, "")
	summarize(p.fromResp).addTo(&r, "from_response_")
	r.value = fmt.Sprintf("%d idle: %v", idle, l)
	return []result{r}, nil
}

// pushRates measures the push rate at batch sizes 1 and 100.
func pushRates(ctx context.Context, b *bench) ([]result, error) {
	var out []result
	for _, size := range []int{1, 100} {
		r, err := pushRate(ctx, b, size)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// pushEvent is one event of the rate figures, about 40 bytes.
func pushEvent(n int) string { return `{"n":` + strconv.Itoa(n) + `,"data":"0123456789abcdef"}` }

// pushRate measures events pushed to a receiver that answers 204, from
// cfg.cycleC streams at once, at batch size size. Each stream's goroutine
// appends a burst of events in one request and waits until the receiver
// has had them all, so that appends cost little against the POSTs. The
// ceiling is the rate at which the same client, at the same concurrency,
// gets a bare handler to answer a small JSON POST.
func pushRate(ctx context.Context, b *bench, size int) (_ result, err error) {
	c := b.cfg.cycleC
	burst := 50 * size
	bareURL, stopBare, err := startBare()
	if err != nil {
		return result{}, err
	}
	defer func() { err = errors.Join(err, stopBare(ctx)) }()

	paths := streamNames("/push/", c)
	reached := make(map[string]chan string, c) // stream → offsets its batches end at
	for _, p := range paths {
		reached[p] = make(chan string, 4096)
	}
	e, err := b.startPush(ctx, nil, func(p *receiver.EventsPayload, _ time.Time) bool {
		reached[p.Stream] <- p.Offset
		return false
	})
	if err != nil {
		return result{}, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	for _, p := range paths {
		if _, err := e.do(ctx, http.MethodPut, p, "application/json", nil, http.StatusCreated); err != nil {
			return result{}, err
		}
	}
	fields := fmt.Sprintf(`"batch":{"max_size":%d,"max_wait_ms":0}`, size)
	if err := e.subscribePush(ctx, "push", "/push/*", fields); err != nil {
		return result{}, err
	}
	var mu sync.Mutex
	next := 0
	push := func(i int) error {
		mu.Lock()
		first := next
		next += burst
		mu.Unlock()
		events := make([]string, burst)
		for k := range events {
			events[k] = pushEvent(first + k)
		}
		resp, err := e.do(ctx, http.MethodPost, paths[i], "application/json", []byte("["+strings.Join(events, ",")+"]"), http.StatusNoContent)
		if err != nil {
			return err
		}
		tail := resp.Header.Get("Stream-Next-Offset")
		timeout := time.After(waitFor)
		for {
			select {
			case at := <-reached[paths[i]]:
				if at == tail {
					return nil
				}
			case <-timeout:
				return fmt.Errorf("%s: no batch reached %s within %v", paths[i], tail, waitFor)
			}
		}
	}
	bare := func(int) error { return postBare(ctx, b.hc, bareURL) }
	bareTotal, pushTotal, err := alternate(ctx, c, b.cfg.cycleFor, bare, push)
	if err != nil {
		return result{}, err
	}
	events := float64(pushTotal.n*int64(burst)) / pushTotal.wall.Seconds()
	posts := events / float64(size)
	bareRate := bareTotal.rate()
	r := result{name: "push_rate", label: fmt.Sprintf("events pushed/s, batch %d, %d streams", size, c)}
	r.add("batch", size)
	r.add("c", c)
	r.add("events_per_s", int64(events))
	r.add("posts_per_s", int64(posts))
	r.add("bare_rps", int64(bareRate))
	r.add("fraction", fmt.Sprintf("%.2f", posts/bareRate))
	r.add("cpu_us_per_event", fmt.Sprintf("%.2f", us64(pushTotal.cpuPer())/float64(burst)))
	r.add("commits_per_post", fmt.Sprintf("%.2f", float64(pushTotal.commits)/max(posts*pushTotal.wall.Seconds(), 1)))
	r.add("transitions_per_commit", fmt.Sprintf("%.2f", pushTotal.transitionsPerCommit()))
	r.add("cpu_us_per_bare", fmt.Sprintf("%.1f", us64(bareTotal.cpuPer())))
	r.value = fmt.Sprintf("%.0f events/s in %.0f POSTs/s = %.2f of bare %.0f req/s", events, posts, posts/bareRate, bareRate)
	switch {
	case size == 1:
		r.goal = "≥ 0.5 of ceiling in POSTs/s"
		r.met = posts >= 0.5*bareRate
	case b.store == "memory":
		r.goal = "≥ 100,000 events/s"
		r.met = events >= 100_000
	}
	return r, nil
}

// pushHang measures what cfg.wokenK push consumers, capped, cost while
// their receiver hangs on every POST: each has a batch started and waits
// in its destination's lane or hangs in flight. It then appends more
// events to every stream, which the hanging consumers must not buffer: the
// engine's growth, the appends' own cost in the host's streams taken off
// (measured on as many streams no subscription matches), stays flat.
func pushHang(ctx context.Context, b *bench) (_ []result, err error) {
	e, err := b.startPush(ctx, nil, func(*receiver.EventsPayload, time.Time) bool { return true })
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	k := b.capped(b.cfg.wokenK)
	hung := func(i int) string { return "/hung/" + strconv.Itoa(i) }
	control := func(i int) string { return "/control/" + strconv.Itoa(i) }
	event := `[{"data":"` + strings.Repeat("x", 1000) + `"}]`
	appendAll := func(name func(int) string) error {
		return parallel(ctx, k, b.cfg.workers, func(i int) error {
			_, err := e.do(ctx, http.MethodPost, name(i), "application/json", []byte(event), http.StatusNoContent)
			return err
		})
	}
	for _, name := range []func(int) string{hung, control} {
		if err := parallel(ctx, k, b.cfg.workers, func(i int) error {
			_, err := e.do(ctx, http.MethodPut, name(i), "application/json", nil, http.StatusCreated)
			return err
		}); err != nil {
			return nil, err
		}
	}
	if err := e.subscribePush(ctx, "hung", "/hung/*", `"batch":{"max_wait_ms":0},"timeout_ms":300000,"retry":{"max_attempts":0}`); err != nil {
		return nil, err
	}
	measure := func() (uint64, int64) {
		e.b.hc.CloseIdleConnections()
		awaitGoroutines()
		return heapAfterGC(), rss()
	}
	// Each measurement is paired with appends to as many control streams
	// first, whose cost in the host's streams is taken off: a stream's
	// storage grows by steps, so control and hung streams get the same
	// appends in the same order.
	heap0, rss0 := measure()
	if err := appendAll(control); err != nil {
		return nil, err
	}
	heap1, rss1 := measure()
	if err := appendAll(hung); err != nil {
		return nil, err
	}
	if err := awaitState(ctx, e, webhooks.StateWaking, k); err != nil {
		return nil, err
	}
	heap2, rss2 := measure()
	goroutines := runtime.NumGoroutine()
	// Four more events a stream: the host's streams grow; the engine must
	// not.
	for range 4 {
		if err := appendAll(control); err != nil {
			return nil, err
		}
	}
	heap3, rss3 := measure()
	for range 4 {
		if err := appendAll(hung); err != nil {
			return nil, err
		}
	}
	heap4, rss4 := measure()
	// Each is the hung streams' step less the control streams' before it.
	net := func(h0, h1, h2 uint64, r0, r1, r2 int64) (float64, float64) {
		return bytesPer(int64(h2)-int64(h1)-(int64(h1)-int64(h0)), k), bytesPer(r2-r1-(r1-r0), k)
	}
	hangHeap, hangRSS := net(heap0, heap1, heap2, rss0, rss1, rss2)
	growHeap, growRSS := net(heap2, heap3, heap4, rss2, rss3, rss4)
	r := result{name: "push_hang", label: "push consumers whose receiver hangs"}
	r.add("k", k)
	r.add("heap_bytes_per_consumer", int64(hangHeap))
	r.add("rss_bytes_per_consumer", int64(hangRSS))
	r.add("growth_heap_bytes_per_consumer_per_4KiB", int64(growHeap))
	r.add("growth_rss_bytes_per_consumer_per_4KiB", int64(growRSS))
	r.add("goroutines", goroutines)
	r.value = fmt.Sprintf("K=%d hanging: heap %.0f B, RSS %.0f B each; 4 KiB more events a stream: engine %+.0f B heap, %+.0f B RSS each; %d goroutines",
		k, hangHeap, hangRSS, growHeap, growRSS, goroutines)
	r.goal = "no growth with more events (< 256 B per 4 KiB)"
	r.met = growHeap < 256
	return []result{r}, nil
}

// awaitState waits until k consumers of the Store are in state.
func awaitState(ctx context.Context, e *env, state webhooks.ConsumerState, k int) error {
	deadline := time.Now().Add(waitFor + time.Duration(k)*time.Millisecond)
	for {
		counts, err := e.store.CountConsumers(ctx)
		if err != nil {
			return err
		}
		if counts[state] == k {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d consumers %s: %v", counts[state], k, state, counts)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
