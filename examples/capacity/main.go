// Command capacity measures what one PostgreSQL holds: an engine on pgstore
// over a database seeded with many IDLE consumers, written with COPY in the
// Store's own encoding (webhooks.Consumer.MarshalData), so that seeding a
// million consumers takes a minute rather than hours of synced creates.
//
//	capacity seed -schema big -subs 10000 -consumers 1000000   # -deadlines: every consumer WAKING, due in a year
//	capacity run -schema big -baseline small                    # RSS, Start, sweep, scheduler, append → wake
//	capacity run -schema small -pad 1000000                     # the same, with as many streams in the process as big's
//	capacity notify -schema big -instances 3                    # subscription changes seen by 3 engines
//	capacity drop -schema big
//
// The DSN comes from -postgres, by default $STREAMHOOKS_TEST_POSTGRES. The
// streams live in this process's memory (source.go), indexed by directory
// as a host's stream store would be; the engine's own memory is measured
// as what Start adds to a process that already holds them.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: capacity seed|run|notify|drop [flags]")
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	var c config
	fs.StringVar(&c.dsn, "postgres", os.Getenv("STREAMHOOKS_TEST_POSTGRES"), "database DSN")
	fs.StringVar(&c.schema, "schema", "capacity", "schema of the seeded tables")
	fs.StringVar(&c.baseline, "baseline", "", "run: a second seeded schema whose engine the append → wake latency is measured against, in turns")
	fs.IntVar(&c.subs, "subs", 10_000, "seed: subscriptions")
	fs.IntVar(&c.consumers, "consumers", 1_000_000, "seed: consumers, one stream each, spread over the subscriptions")
	fs.BoolVar(&c.deadlines, "deadlines", false, "seed: every consumer WAKING with a deadline a year away")
	fs.IntVar(&c.pad, "pad", 0, "run: streams that no subscription matches, added to the host's streams before Start, so that a small schema's engine starts in a process holding as many streams as a big one's")
	fs.IntVar(&c.samples, "samples", 2000, "run: appends measured per engine")
	fs.DurationVar(&c.idleFor, "idle-for", 0, "run: how long the idle engine's CPU is measured (0: 10 poll intervals)")
	fs.StringVar(&c.heapProfile, "heapprofile", "", "run: write the live heap, once the start-up sweep has ended, to this file")
	fs.IntVar(&c.instances, "instances", 3, "notify: engines on the database")
	fs.IntVar(&c.changes, "changes", 200, "notify: subscriptions created one after another")
	_ = fs.Parse(args)
	if c.dsn == "" {
		fmt.Fprintln(os.Stderr, "capacity: no database: set -postgres or STREAMHOOKS_TEST_POSTGRES")
		os.Exit(2)
	}
	ctx := context.Background()
	var err error
	switch cmd {
	case "seed":
		err = seed(ctx, c)
	case "run":
		err = run(ctx, c)
	case "notify":
		err = notify(ctx, c)
	case "drop":
		err = exec(ctx, c.dsn, "DROP SCHEMA IF EXISTS "+c.schema+" CASCADE")
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "capacity:", err)
		os.Exit(1)
	}
}

// config holds the flags.
type config struct {
	dsn, schema, baseline string
	subs, consumers, pad  int
	deadlines             bool
	samples               int
	idleFor               time.Duration
	instances, changes    int
	heapProfile           string
}
