// Command soak load-tests the webhook stack on loopback and prints the
// figures: thousands of consumers behind healthy, slow and failing webhook
// endpoints, events appended for a while, then checks that no ack was lost,
// no consumer is stuck and failing consumers were collected, and that
// goroutines, heap and connections return to where they started.
//
//	go run ./examples/soak -consumers 20000 -load 60s -rate 2000
//
// It exits 1 if the soak broke an invariant or resources did not settle.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/streamhooks/webhooks/examples/internal/soak"
)

func main() {
	cfg := soak.DefaultConfig()
	mix := cfg.Mix.String()
	flag.IntVar(&cfg.Consumers, "consumers", cfg.Consumers, "consumers, one stream each")
	flag.DurationVar(&cfg.Load, "load", cfg.Load, "how long to append events")
	flag.Float64Var(&cfg.AppendRate, "rate", cfg.AppendRate, "appends per second offered")
	flag.IntVar(&cfg.Appenders, "appenders", cfg.Appenders, "goroutines appending")
	flag.StringVar(&mix, "mix", mix, "weights of healthy,slow,failing endpoints")
	flag.DurationVar(&cfg.Drain, "drain", cfg.Drain, "bound on the wait for consumers to settle after the load")
	flag.DurationVar(&cfg.WakingTimeout, "waking-timeout", cfg.WakingTimeout, "engine WAKING timeout")
	flag.DurationVar(&cfg.LivenessTimeout, "liveness-timeout", cfg.LivenessTimeout, "engine liveness timeout")
	flag.DurationVar(&cfg.RequestTimeout, "request-timeout", cfg.RequestTimeout, "engine webhook request timeout")
	flag.DurationVar(&cfg.FailureGCAfter, "gc-after", cfg.FailureGCAfter, "engine failure GC delay")
	flag.IntVar(&cfg.MaxConcurrentDeliveries, "deliveries", cfg.MaxConcurrentDeliveries, "engine webhook POSTs in flight")
	flag.DurationVar(&cfg.MaxLag, "max-lag", cfg.MaxLag, "how far past its deadline a consumer may be before it counts as stuck")
	quiet := flag.Bool("q", false, "print only the figures")
	verbose := flag.Bool("v", false, "log the engine's and servers' info lines, such as each consumer collected")
	flag.Parse()

	m, err := soak.ParseMix(mix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg.Mix = m
	if *verbose {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if !*quiet {
		start := time.Now()
		cfg.Progress = func(s string) {
			fmt.Fprintf(os.Stderr, "%6.1fs %s\n", time.Since(start).Seconds(), s)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := soak.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if !rep.OK() {
		os.Exit(1)
	}
}
