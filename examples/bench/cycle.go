package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// cycleRounds is how many times the wake-cycle figure alternates between
// the bare handler and the engine. On a machine shared with other work the
// CPU this process gets drifts; alternating exposes both to the same drift.
const cycleRounds = 10

// wakeCycle measures cfg.cycleC consumers each looping append → webhook →
// one callback that claims, acks and finishes, against a ceiling: a third of
// the rate at which the same client, at the same concurrency, gets a bare
// handler to answer a small JSON POST, since a cycle is three such requests.
// It also reports the CPU time each costs, which the machine's other load
// does not change as much.
func wakeCycle(ctx context.Context, b *bench) (_ []result, err error) {
	c := b.cfg.cycleC
	bareURL, stopBare, err := startBare()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stopBare(ctx)) }()

	paths := streamNames("/cyc/", c)
	in := newInbox("cyc", paths)
	e, err := b.start(ctx, in.wake)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	if err := e.subscribe(ctx, "cyc", "/cyc/*"); err != nil {
		return nil, err
	}
	if err := e.createStreams(ctx, c, func(i int) string { return paths[i] }); err != nil {
		return nil, err
	}
	cycle := func(i int) error {
		path := paths[i]
		tail, err := e.appendTo(ctx, path)
		if err != nil {
			return err
		}
		n, err := in.await(webhooks.ConsumerID("cyc", path))
		if err != nil {
			return err
		}
		cc := webhooks.NewCallbackClient(n, b.hc)
		_, err = cc.Send(ctx, webhooks.CallbackRequest{Acks: []webhooks.StreamOffset{{Path: path, Offset: tail}}, Done: true})
		return err
	}
	bare := func(int) error { return postBare(ctx, b.hc, bareURL) }

	var bareTotal, cycleTotal phase
	slice := b.cfg.cycleFor / cycleRounds
	for range cycleRounds {
		p, err := runFor(ctx, c, slice, bare)
		if err != nil {
			return nil, fmt.Errorf("bare handler: %w", err)
		}
		bareTotal.add(p)
		if p, err = runFor(ctx, c, slice, cycle); err != nil {
			return nil, err
		}
		cycleTotal.add(p)
	}
	rate, bareRate := cycleTotal.rate(), bareTotal.rate()
	ceiling := bareRate / 3
	cpuCycle, cpuBare := cycleTotal.cpuPer(), bareTotal.cpuPer()
	r := result{name: "wake_cycle", label: fmt.Sprintf("wake cycles/s, %d consumers", c)}
	r.add("c", c)
	r.add("cycles", cycleTotal.n)
	r.add("cycles_per_s", int64(rate))
	r.add("bare_rps", int64(bareRate))
	r.add("ceiling", int64(ceiling))
	r.add("fraction", fmt.Sprintf("%.2f", rate/ceiling))
	r.add("cpu_us_per_cycle", fmt.Sprintf("%.1f", us64(cpuCycle)))
	r.add("cpu_us_per_bare", fmt.Sprintf("%.1f", us64(cpuBare)))
	r.add("cpu_fraction", fmt.Sprintf("%.2f", 3*us64(cpuBare)/us64(cpuCycle)))
	r.add("allocs_per_cycle", int64(cycleTotal.mallocsPer()))
	r.add("allocs_per_bare", int64(bareTotal.mallocsPer()))
	r.value = fmt.Sprintf("%.0f/s = %.2f of ceiling %.0f/s (bare %.0f req/s); CPU %.0fµs/cycle vs %.0fµs/3 bare (%.2f)",
		rate, rate/ceiling, ceiling, bareRate, us64(cpuCycle), 3*us64(cpuBare), 3*us64(cpuBare)/us64(cpuCycle))
	r.goal = "≥ 0.5 of ceiling"
	r.met = rate >= ceiling/2
	return []result{r}, nil
}

func us64(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// phase is the work done in a timed run: how many operations, in what wall
// time, using how much of the process's CPU time and how many heap
// allocations.
type phase struct {
	n         int64
	wall, cpu time.Duration
	mallocs   uint64
}

func (p *phase) add(q phase) {
	p.n += q.n
	p.wall += q.wall
	p.cpu += q.cpu
	p.mallocs += q.mallocs
}

func (p phase) mallocsPer() float64 { return float64(p.mallocs) / float64(max(p.n, 1)) }

func (p phase) rate() float64 { return float64(p.n) / p.wall.Seconds() }

func (p phase) cpuPer() time.Duration {
	if p.n == 0 {
		return 0
	}
	return p.cpu / time.Duration(p.n)
}

// runFor runs op in a loop from c goroutines, goroutine i passing i, until d
// has passed, and counts the operations.
func runFor(ctx context.Context, c int, d time.Duration, op func(i int) error) (phase, error) {
	var n atomic.Int64
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := cpuTime()
	start := time.Now()
	deadline := start.Add(d)
	err := parallel(ctx, c, c, func(i int) error {
		for time.Now().Before(deadline) {
			if err := op(i); err != nil {
				return err
			}
			n.Add(1)
		}
		return nil
	})
	wall, cpu := time.Since(start), cpuTime()-cpu0
	runtime.ReadMemStats(&m1)
	return phase{n: n.Load(), wall: wall, cpu: cpu, mallocs: m1.Mallocs - m0.Mallocs}, err
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bareBody is a callback-sized JSON body.
const bareBody = `{"epoch":1,"acks":[{"path":"/cyc/0","offset":"0000000000000000_0000000000000016"}],"done":true}`

// startBare serves a bare handler that answers a small JSON POST, the
// least any HTTP request can cost, on loopback.
func startBare() (url string, stop func(context.Context) error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: waitFor, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/callback", func(ctx context.Context) error {
		err := srv.Shutdown(ctx)
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	}, nil
}

// postBare makes one request to the bare handler.
func postBare(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(bareBody))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer x")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bare handler answered %s", resp.Status)
	}
	return nil
}
