package main

import (
	"context"
	"errors"
	"fmt"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// cycleGoals are the fractions of the ceiling the wake cycle must reach on
// each Store.
var cycleGoals = map[string]float64{"memory": 0.6, "sqlite": 0.35, "postgres": 0.25}

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
	// The streams come first, so that no wake of a stream's creation is
	// taken for a cycle's (see wakeLatency).
	if err := e.createStreams(ctx, c, func(i int) string { return paths[i] }); err != nil {
		return nil, err
	}
	if err := e.subscribe(ctx, "cyc", "/cyc/*"); err != nil {
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
		cc := receiver.NewCallbackClient(n, b.hc)
		_, err = cc.Send(ctx, receiver.CallbackRequest{Acks: []webhooks.StreamOffset{{Path: path, Offset: tail}}, Done: true})
		return err
	}
	bare := func(int) error { return postBare(ctx, b.hc, bareURL) }

	bareTotal, cycleTotal, err := alternate(ctx, c, b.cfg.cycleFor, bare, cycle)
	if err != nil {
		return nil, err
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
	r.add("commits_per_cycle", fmt.Sprintf("%.2f", cycleTotal.commitsPer()))
	r.add("transitions_per_commit", fmt.Sprintf("%.2f", cycleTotal.transitionsPerCommit()))
	r.add("allocs_per_cycle", int64(cycleTotal.mallocsPer()))
	r.add("allocs_per_bare", int64(bareTotal.mallocsPer()))
	summarize(cycleTotal.took).addTo(&r, "cycle_")
	r.value = fmt.Sprintf("%.0f/s = %.2f of ceiling %.0f/s (bare %.0f req/s); CPU %.0fµs/cycle vs %.0fµs/3 bare (%.2f)",
		rate, rate/ceiling, ceiling, bareRate, us64(cpuCycle), 3*us64(cpuBare), 3*us64(cpuBare)/us64(cpuCycle))
	goal := cycleGoals[b.store]
	r.goal = fmt.Sprintf("≥ %.2g of ceiling", goal)
	r.met = rate >= goal*ceiling
	return []result{r}, nil
}
