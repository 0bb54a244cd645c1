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
	"sync"
	"syscall"
	"time"

	"github.com/streamhooks/webhooks/internal/commitstat"
)

// rounds is how many times a throughput figure alternates between the bare
// handler and the engine.
const rounds = 10

// us64 is d in microseconds, with fractions.
func us64(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// phase is the work done in timed runs: how many operations, in what wall
// time, using how much of the process's CPU time and how many heap
// allocations, and how long each operation took.
type phase struct {
	n         int64
	wall, cpu time.Duration
	mallocs   uint64
	took      []time.Duration
	// commits and transitions are the durable Stores' group commits in
	// the run and the consumer transitions they carried (commitstat).
	commits, transitions int64
}

func (p *phase) add(q phase) {
	p.n += q.n
	p.wall += q.wall
	p.cpu += q.cpu
	p.mallocs += q.mallocs
	p.took = append(p.took, q.took...)
	p.commits += q.commits
	p.transitions += q.transitions
}

// commitsPer is the group commits per operation.
func (p phase) commitsPer() float64 { return float64(p.commits) / float64(max(p.n, 1)) }

// transitionsPerCommit is how many consumer transitions one commit carried.
func (p phase) transitionsPerCommit() float64 {
	return float64(p.transitions) / float64(max(p.commits, 1))
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
// has passed, and times every operation.
func runFor(ctx context.Context, c int, d time.Duration, op func(i int) error) (phase, error) {
	var mu sync.Mutex
	var took []time.Duration
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := cpuTime()
	commits0, transitions0 := commitstat.Read()
	start := time.Now()
	deadline := start.Add(d)
	err := parallel(ctx, c, c, func(i int) error {
		var mine []time.Duration
		defer func() {
			mu.Lock()
			took = append(took, mine...)
			mu.Unlock()
		}()
		for t := time.Now(); t.Before(deadline); t = time.Now() {
			if err := op(i); err != nil {
				return err
			}
			mine = append(mine, time.Since(t))
		}
		return nil
	})
	wall, cpu := time.Since(start), cpuTime()-cpu0
	commits1, transitions1 := commitstat.Read()
	runtime.ReadMemStats(&m1)
	return phase{n: int64(len(took)), wall: wall, cpu: cpu, mallocs: m1.Mallocs - m0.Mallocs, took: took,
		commits: commits1 - commits0, transitions: transitions1 - transitions0}, err
}

// alternate runs a and b in turn, each rounds times for d/rounds. On a
// machine shared with other work the CPU this process gets drifts;
// alternating exposes both to the same drift.
func alternate(ctx context.Context, c int, d time.Duration, a, b func(i int) error) (pa, pb phase, err error) {
	slice := d / time.Duration(rounds)
	for range rounds {
		p, err := runFor(ctx, c, slice, a)
		if err != nil {
			return pa, pb, err
		}
		pa.add(p)
		if p, err = runFor(ctx, c, slice, b); err != nil {
			return pa, pb, err
		}
		pb.add(p)
	}
	return pa, pb, nil
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
