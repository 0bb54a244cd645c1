package soak

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestSoak runs the CI-sized soak. SOAK_CONSUMERS, SOAK_LOAD (a duration)
// and SOAK_MIX scale it up.
func TestSoak(t *testing.T) {
	cfg := DefaultConfig()
	if n, err := strconv.Atoi(os.Getenv("SOAK_CONSUMERS")); err == nil {
		cfg.Consumers = n
	}
	if d, err := time.ParseDuration(os.Getenv("SOAK_LOAD")); err == nil {
		cfg.Load = d
	}
	if s := os.Getenv("SOAK_MIX"); s != "" {
		m, err := ParseMix(s)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Mix = m
	}
	cfg.Progress = func(s string) { t.Log(s) }
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("figures:\n%s", table.String())
	if !rep.OK() {
		t.Fatalf("soak failed: %d violations", len(rep.Violations))
	}
	// The run must have exercised what it checks.
	for _, outcome := range []string{"ok", "done", "http_error", "timeout", "error"} {
		if rep.Deliveries[outcome] == 0 {
			t.Errorf("no delivery had outcome %q", outcome)
		}
	}
	for _, k := range []kind{kindFail5xx, kindReset, kindHang} {
		if rep.Collected[k.String()] == 0 {
			t.Errorf("no %s consumer was collected", k)
		}
	}
	if rep.Acks == 0 || rep.Peak.Conns <= rep.Before.Conns {
		t.Errorf("acks %d, peak conns %d over a baseline of %d: the load did not happen", rep.Acks, rep.Peak.Conns, rep.Before.Conns)
	}
}
