package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestSmoke runs every figure at a tiny size, so the program cannot rot:
// each must finish and print its BENCH line.
func TestSmoke(t *testing.T) {
	cfg := defaultConfig()
	cfg.idle = 20
	cfg.samples = 20
	cfg.cycleC = 2
	cfg.cycleFor = 100 * time.Millisecond
	cfg.fanout = []int{5, 50}
	cfg.idleK = 50
	cfg.callbackC = 2
	cfg.callbackFor = 100 * time.Millisecond
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), cfg, &out))
	t.Log(out.String())
	for _, name := range []string{"wake_latency", "wake_cycle", "fanout", "idle_scale", "callback_ack"} {
		require.Contains(t, out.String(), "BENCH name="+name+" store=memory ", out.String())
	}
	require.Equal(t, 6, strings.Count(out.String(), "BENCH "), out.String())
}

func TestRunRejectsUnknownNames(t *testing.T) {
	cfg := defaultConfig()
	cfg.store = "nope"
	require.ErrorContains(t, run(context.Background(), cfg, &bytes.Buffer{}), `unknown store "nope"`)
	cfg = defaultConfig()
	cfg.figures = []string{"nope"}
	require.ErrorContains(t, run(context.Background(), cfg, &bytes.Buffer{}), `unknown figure "nope"`)
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
