package main

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// smokeStores are the Stores the smoke test runs on: every one, but
// postgres only with a database in STREAMHOOKS_TEST_POSTGRES, which CI must
// set.
func smokeStores(t *testing.T) []string {
	names := storeNames()
	if os.Getenv(postgresEnv) == "" {
		msg := postgresEnv + " is not set; set it to a PostgreSQL DSN to run the figures on postgres"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Log(msg)
		names = slices.DeleteFunc(names, func(n string) bool { return n == "postgres" })
	}
	return names
}

// TestSmoke runs every figure at a tiny size on every Store, so the program
// cannot rot: each must finish and print its BENCH line per Store, and the
// table must put each figure's Stores in adjacent rows.
func TestSmoke(t *testing.T) {
	cfg := defaultConfig()
	cfg.stores = smokeStores(t)
	cfg.idle = 20
	cfg.samples = 20
	cfg.cycleC = 2
	cfg.cycleFor = 100 * time.Millisecond
	cfg.fanout = []int{5, 20}
	cfg.idleK = 50
	cfg.wokenK = 40
	cfg.takeoverK = 20
	cfg.durableCap = 30
	cfg.callbackC = 2
	cfg.callbackFor = 100 * time.Millisecond
	cfg.fairHostile = 30
	cfg.fairSamples = 20
	cfg.fairFor = 0
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), cfg, &out))
	t.Log(out.String())
	for _, store := range cfg.stores {
		for _, name := range []string{"wake_latency", "wake_cycle", "fanout", "idle_scale", "woken_scale", "callback_ack",
			"push_latency", "push_rate", "push_hang"} {
			require.Contains(t, out.String(), "BENCH name="+name+" store="+store+" ", out.String())
		}
	}
	// The fairness figure runs on memory stores only, once per spread.
	for _, spread := range []string{"one_subscription", "subs_one_host", "many_hosts"} {
		require.Contains(t, out.String(), "BENCH name=fairness store=memory spread="+spread+" hostile=30 ", out.String())
	}
	// The instances and takeover figures run on postgres only.
	onlyPostgres := 0
	if slices.Contains(cfg.stores, "postgres") {
		onlyPostgres = 2
		require.Contains(t, out.String(), "BENCH name=instances store=postgres ")
		require.Contains(t, out.String(), "BENCH name=takeover store=postgres k=20 ")
	}
	for _, store := range cfg.stores {
		for _, batch := range []string{"1", "100"} {
			require.Contains(t, out.String(), "BENCH name=push_rate store="+store+" batch="+batch+" ")
		}
	}
	require.Equal(t, 11*len(cfg.stores)+3+onlyPostgres, strings.Count(out.String(), "BENCH "), out.String())
	require.Contains(t, out.String(), "BENCH name=idle_scale store=memory k=50 ")
	require.Contains(t, out.String(), "BENCH name=idle_scale store=sqlite k=30 ", "a durable store's K is capped")

	// The table: a header, then per label one row per Store in cfg.stores
	// order, the label only on the first.
	_, table, ok := strings.Cut(out.String(), "\n\n")
	require.True(t, ok, out.String())
	rows := strings.Split(strings.TrimSpace(table), "\n")
	require.Len(t, rows, 1+11*len(cfg.stores)+3+onlyPostgres, table)
	for i, row := range rows[1 : 1+7*len(cfg.stores)] {
		store := cfg.stores[i%len(cfg.stores)]
		require.Contains(t, row, " "+store+" ", table)
		require.Equal(t, i%len(cfg.stores) != 0, strings.HasPrefix(row, " "), "label only on a figure's first row:\n%s", table)
	}
}

func TestRunRejectsUnknownNames(t *testing.T) {
	cfg := defaultConfig()
	cfg.stores = []string{"memory", "nope"}
	require.ErrorContains(t, run(context.Background(), cfg, &bytes.Buffer{}), `unknown store "nope"`)
	cfg = defaultConfig()
	cfg.figures = []string{"nope"}
	require.ErrorContains(t, run(context.Background(), cfg, &bytes.Buffer{}), `unknown figure "nope"`)
}

func TestDurableCap(t *testing.T) {
	cfg := defaultConfig()
	cfg.fanout = []int{10, 10_000, 100_000, 200_000}
	cfg.durableCap = 10_000
	mem, sql := newBench(cfg, "memory", stores["memory"]), newBench(cfg, "sqlite", stores["sqlite"])
	require.Equal(t, []int{10, 10_000, 100_000, 200_000}, mem.fanoutSizes())
	require.Equal(t, []int{10, 10_000}, sql.fanoutSizes())
	require.Equal(t, 100_000, mem.capped(100_000))
	require.Equal(t, 10_000, sql.capped(100_000))
	require.Equal(t, 500, sql.capped(500))
	cfg.durableCap = 0
	require.Equal(t, 100_000, newBench(cfg, "sqlite", stores["sqlite"]).capped(100_000), "0 is no cap")
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	require.Equal(t, latencies{n: 100, p50: 50 * time.Millisecond, p99: 99 * time.Millisecond, max: 100 * time.Millisecond}, l)
	require.Equal(t, latencies{n: 1, p50: time.Second, p99: time.Second, max: time.Second}, summarize([]time.Duration{time.Second}))
}
