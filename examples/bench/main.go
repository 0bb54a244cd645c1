// Command bench measures the webhook engine end to end: the example stream
// server with the engine mounted, on loopback, and in-process webhook
// receivers that act as consumers through the callback API.
//
//	go run ./examples/bench                            # every figure on memory and sqlite, < 3 min
//	go run ./examples/bench -store postgres -figures cycle  # DSN from -postgres or $STREAMHOOKS_TEST_POSTGRES
//	go run ./examples/bench -figures cycle -cycle-c 64 # one figure, scaled
//	go run ./examples/bench -store memory -figures idle -idle-k 1000000
//
// It prints a table for people, with a row per figure and Store, and, for
// each, one line for machines:
//
//	BENCH name=wake_latency store=memory idle=10000 ... p50_us=... p99_us=...
//
// -store takes a comma-separated list of names from the stores table. Each
// figure runs on every Store in turn before the next figure starts, so
// that the Stores' figures share the machine's drift.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
	"github.com/streamhooks/webhooks/pgstore"
	"github.com/streamhooks/webhooks/sqlitestore"
)

// postgresEnv names the variable -postgres defaults to, the one pgstore's
// tests read.
const postgresEnv = "STREAMHOOKS_TEST_POSTGRES"

// postgresConns is the pool size of a postgres figure: enough for the
// figures' concurrent callbacks and deliveries, each of which holds a
// connection through its transition, and small on a shared cluster.
const postgresConns = 16

// storeKind is a Store a run can use. open opens a fresh, empty Store in
// dir, a new directory for Stores that keep files, and returns it with the
// function that closes it and removes what it stored outside dir. A durable Store syncs every consumer and
// subscription it creates to disk, so its figures create at most
// -durable-cap of them; see bench.capped.
type storeKind struct {
	open    func(ctx context.Context, cfg config, dir string) (webhooks.Store, func() error, error)
	durable bool
}

// stores are the Stores a run can use, by -store name.
var stores = map[string]storeKind{
	"memory": {open: func(context.Context, config, string) (webhooks.Store, func() error, error) {
		return memstore.New(), func() error { return nil }, nil
	}},
	// The default SyncFull: every write that returns has been synced.
	"sqlite": {durable: true, open: func(_ context.Context, _ config, dir string) (webhooks.Store, func() error, error) {
		s, err := sqlitestore.Open(filepath.Join(dir, "bench.db"))
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}},
	"postgres": {durable: true, open: openPostgres},
}

// openPostgres opens a pgstore in a new schema of the database at
// cfg.postgres; closing it drops the schema.
func openPostgres(ctx context.Context, cfg config, _ string) (webhooks.Store, func() error, error) {
	if cfg.postgres == "" {
		return nil, nil, fmt.Errorf("no database: set -postgres or %s", postgresEnv)
	}
	schema, drop, err := newSchema(ctx, cfg.postgres)
	if err != nil {
		return nil, nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.postgres)
	if err != nil {
		return nil, nil, errors.Join(err, drop())
	}
	pc.ConnConfig.RuntimeParams["search_path"] = schema
	pc.MaxConns = postgresConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, nil, errors.Join(err, drop())
	}
	s, err := pgstore.New(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, nil, errors.Join(err, drop())
	}
	return s, func() error {
		pool.Close()
		return drop()
	}, nil
}

// newSchema creates a schema with a fresh name in the database at dsn, and
// returns it with the function that drops it.
func newSchema(ctx context.Context, dsn string) (string, func() error, error) {
	suffix := make([]byte, 8)
	_, _ = rand.Read(suffix)
	schema := "streamhooks_bench_" + hex.EncodeToString(suffix)
	if err := postgresExec(ctx, dsn, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, err
	}
	return schema, func() error { return postgresExec(context.Background(), dsn, "DROP SCHEMA "+schema+" CASCADE") }, nil
}

// postgresExec runs sql on a connection of its own to the database at dsn.
func postgresExec(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, sql)
	return errors.Join(err, conn.Close(ctx))
}

// figures are the measurements, in the order they run.
var figures = []struct {
	name string
	run  func(ctx context.Context, b *bench) ([]result, error)
}{
	{"latency", wakeLatency},
	{"cycle", wakeCycle},
	{"fanout", fanOut},
	{"idle", idleScale},
	{"woken", wokenScale},
	{"callback", callbackRate},
	{"fairness", fairness},
	{"pushlatency", pushLatency},
	{"push", pushRates},
	{"pushhang", pushHang},
	// On postgres only, last, so that the table's other rows stay in step.
	{"instances", instances},
	{"takeover", takeover},
}

// config holds the flags. Every figure has its own knobs so that each can be
// scaled alone.
type config struct {
	stores      []string
	figures     []string
	idle        int           // idle consumers present while wake latency is measured
	samples     int           // wakes measured per latency figure
	cycleC      int           // concurrent consumers in the wake-cycle figure
	cycleFor    time.Duration // how long the wake cycle and the bare ceiling each run
	fanout      []int         // subscription counts of the fan-out figure
	idleK       int           // consumers at rest in the idle-scale figure
	wokenK      int           // consumers woken once, then measured at rest
	takeoverK   int           // hung attempts a surviving server takes over in the takeover figure
	durableCap  int           // most consumers or subscriptions a figure creates in a durable Store; 0 for no cap
	callbackC   int           // concurrent clients in the callback figure
	callbackFor time.Duration // how long the callbacks and the bare handler each run
	fairHostile int           // consumers with hostile webhooks in the fairness figure
	fairSamples int           // wakes measured quiet, and at least as many per hostile spread, in the fairness figure
	fairFor     time.Duration // how long the fairness figure measures each hostile spread at least, and a third as long quiet
	workers     int           // concurrent requests while setting up
	postgres    string        // DSN of the database the postgres store makes its schemas in
	cpuProfile  string
	memProfile  string
	heapProfile string // the woken figure's live heap at rest, after the wake
}

func defaultConfig() config {
	return config{
		stores:      []string{"memory", "sqlite"},
		figures:     figureNames(),
		idle:        10_000,
		samples:     3000,
		cycleC:      32,
		cycleFor:    5 * time.Second,
		fanout:      []int{10, 10_000, 100_000},
		idleK:       100_000,
		wokenK:      10_000,
		takeoverK:   100,
		durableCap:  10_000,
		callbackC:   32,
		callbackFor: 5 * time.Second,
		fairHostile: 10_000,
		fairSamples: 1000,
		fairFor:     12 * time.Second,
		workers:     8,
		postgres:    os.Getenv(postgresEnv),
	}
}

func figureNames() []string {
	var names []string
	for _, f := range figures {
		names = append(names, f.name)
	}
	return names
}

func main() {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	storeList := fs.String("store", strings.Join(cfg.stores, ","), "comma-separated stores to measure: "+strings.Join(storeNames(), ", "))
	figs := fs.String("figures", strings.Join(cfg.figures, ","), "comma-separated figures to run")
	fs.IntVar(&cfg.idle, "idle", cfg.idle, "idle consumers present while wake latency is measured")
	fs.IntVar(&cfg.samples, "samples", cfg.samples, "wakes measured per latency figure (wake latency, each fan-out size)")
	fs.IntVar(&cfg.cycleC, "cycle-c", cfg.cycleC, "concurrent consumers in the wake-cycle figure")
	fs.DurationVar(&cfg.cycleFor, "cycle-for", cfg.cycleFor, "duration of the wake-cycle run and of the bare-handler run")
	fan := fs.String("fanout", joinInts(cfg.fanout), "comma-separated subscription counts of the fan-out figure")
	fs.IntVar(&cfg.idleK, "idle-k", cfg.idleK, "consumers at rest in the idle-scale figure (try 1000000)")
	fs.IntVar(&cfg.wokenK, "woken-k", cfg.wokenK, "consumers woken once, then measured at rest, in the woken figure")
	fs.IntVar(&cfg.takeoverK, "takeover-k", cfg.takeoverK, "hung attempts a surviving server takes over in the takeover figure (postgres only; at most 128, the per-host limit, so that all are in flight at once)")
	fs.IntVar(&cfg.durableCap, "durable-cap", cfg.durableCap, "on a durable store, cap -idle, -idle-k, -woken-k and each -fanout size at this (0: no cap)")
	fs.IntVar(&cfg.callbackC, "callback-c", cfg.callbackC, "concurrent clients in the callback figure")
	fs.DurationVar(&cfg.callbackFor, "callback-for", cfg.callbackFor, "duration of the callback run and of the bare-handler run")
	fs.IntVar(&cfg.fairHostile, "fair-hostile", cfg.fairHostile, "consumers with hostile webhooks in the fairness figure (memory stores only)")
	fs.IntVar(&cfg.fairSamples, "fair-samples", cfg.fairSamples, "wakes measured quiet, and at least as many per hostile spread, in the fairness figure")
	fs.DurationVar(&cfg.fairFor, "fair-for", cfg.fairFor, "how long the fairness figure measures each hostile spread at least, and a third as long quiet")
	fs.IntVar(&cfg.workers, "workers", cfg.workers, "concurrent requests while setting up")
	fs.StringVar(&cfg.postgres, "postgres", cfg.postgres, "DSN of a PostgreSQL database for -store postgres, which makes a schema in it per figure and drops it after (default $"+postgresEnv+")")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&cfg.memProfile, "memprofile", "", "write an allocation profile of the whole run to this file")
	fs.StringVar(&cfg.heapProfile, "heapprofile", "", "write the live heap of the woken figure, measured at rest after the wake, to this file (samples every 64 bytes)")
	_ = fs.Parse(os.Args[1:])
	if cfg.heapProfile != "" {
		// Fine enough to attribute a few hundred bytes per consumer.
		runtime.MemProfileRate = 64
	}
	cfg.figures = strings.Split(*figs, ",")
	cfg.stores = strings.Split(*storeList, ",")
	var err error
	if cfg.fanout, err = parseInts(*fan); err != nil {
		fmt.Fprintln(os.Stderr, "bench: -fanout:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run measures the figures cfg names and writes the BENCH lines and the
// table to out.
func run(ctx context.Context, cfg config, out io.Writer) (err error) {
	var benches []*bench
	for _, name := range cfg.stores {
		kind, ok := stores[name]
		if !ok {
			return fmt.Errorf("unknown store %q; have %s", name, strings.Join(storeNames(), ", "))
		}
		b := newBench(cfg, name, kind)
		defer b.close()
		benches = append(benches, b)
	}
	for _, name := range cfg.figures {
		if !slices.Contains(figureNames(), name) {
			return fmt.Errorf("unknown figure %q; have %s", name, strings.Join(figureNames(), ", "))
		}
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Fprintf(out, "# stores=%s nproc=%d GOMAXPROCS=%d %s\n", strings.Join(cfg.stores, ","), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	var results []result
	for _, f := range figures {
		if !slices.Contains(cfg.figures, f.name) {
			continue
		}
		for _, b := range benches {
			start := time.Now()
			rs, err := f.run(ctx, b)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", f.name, b.store, err)
			}
			for i := range rs {
				rs[i].store = b.store
				fmt.Fprintln(out, rs[i].benchLine())
			}
			fmt.Fprintf(out, "# %s on %s took %v\n", f.name, b.store, round(time.Since(start)))
			results = append(results, rs...)
		}
	}
	fmt.Fprintln(out)
	writeTable(out, results)
	if cfg.memProfile != "" {
		err = errors.Join(err, writeAllocProfile(cfg.memProfile))
	}
	return err
}

func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup("allocs").WriteTo(f, 0), f.Close())
}

func storeNames() []string {
	var names []string
	for name := range stores {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// quietLogger logs only errors, so that a run's output stays the figures.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
