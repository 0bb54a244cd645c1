package soak

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/memstore"
)

// checkFixture is a checked memstore holding one consumer of kind k.
func checkFixture(t *testing.T, k kind) (*checkedStore, *violations, string) {
	t.Helper()
	ctx := context.Background()
	v := &violations{}
	s := newCheckedStore(memstore.New(), 4*time.Second, time.Second, v)
	if err := s.CreateSubscription(ctx, &webhooks.Subscription{ID: k.subscriptionID(), Pattern: "/soak/*"}); err != nil {
		t.Fatal(err)
	}
	path := k.streamPath(0)
	id := webhooks.ConsumerID(k.subscriptionID(), path)
	c := &webhooks.Consumer{
		ID: id, SubscriptionID: k.subscriptionID(), PrimaryStream: path, State: webhooks.StateIdle, Epoch: 3,
		Streams: []webhooks.StreamOffset{{Path: path, Offset: "0000000000000000_0000000000000010"}},
	}
	if err := s.CreateConsumer(ctx, c); err != nil {
		t.Fatal(err)
	}
	return s, v, id
}

func checkUpdate(t *testing.T, s *checkedStore, id string, action webhooks.UpdateAction, change func(c *webhooks.Consumer)) {
	t.Helper()
	_, err := s.UpdateConsumer(context.Background(), id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		change(c)
		return action, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheckedStoreFlagsBrokenTransitions feeds the checker each broken
// transition it exists to catch, and one that is fine.
func TestCheckedStoreFlagsBrokenTransitions(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		kind   kind
		action webhooks.UpdateAction
		change func(c *webhooks.Consumer)
		want   string // "" means no violation
	}{
		{"waking without deadline", kindHealthy, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.State = webhooks.StateWaking
		}, "saved WAKING without a deadline"},
		{"live without deadline", kindHealthy, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.State = webhooks.StateLive
		}, "saved LIVE without a deadline"},
		{"epoch back", kindHealthy, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.Epoch = 2
		}, "epoch went back"},
		{"offset back", kindHealthy, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.Streams[0].Offset = "0000000000000000_0000000000000009"
		}, "acked offset of /soak/healthy/s0 went back"},
		{"offset reset", kindHealthy, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.Streams[0].Offset = webhooks.OffsetNone
		}, "went back"},
		{"deleted", kindFail5xx, webhooks.UpdateDelete, func(c *webhooks.Consumer) {}, "deleted"},
		{"dead letter without failures", kindFail5xx, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.State = webhooks.StateFailed
		}, "without a run of failures"},
		{"working endpoint collected", kindSlow, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.State = webhooks.StateFailed
			c.FailingSince = now.Add(-4 * time.Second)
		}, "of a working endpoint (slow)"},
		{"collected early", kindHang, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.State = webhooks.StateFailed
			c.FailingSince = now.Add(-3 * time.Second)
		}, "before FailureGCAfter"},
		{"collected late", kindReset, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.State = webhooks.StateFailed
			c.FailingSince = now.Add(-6 * time.Second)
		}, "late"},
		{"collected on time", kindReset, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.State = webhooks.StateFailed
			c.FailingSince = now.Add(-4500 * time.Millisecond)
		}, ""},
		{"waking with deadline, offset forward", kindHealthy, webhooks.UpdateSave, func(c *webhooks.Consumer) {
			c.State, c.Deadline, c.Epoch = webhooks.StateWaking, now, 4
			c.Streams[0].Offset = "0000000000000000_0000000000000011"
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, v, id := checkFixture(t, tc.kind)
			checkUpdate(t, s, id, tc.action, tc.change)
			got := v.list()
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("violations %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("violations %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// TestCheckedStoreCountsCollections checks the GC tally by kind.
func TestCheckedStoreCountsCollections(t *testing.T) {
	s, v, id := checkFixture(t, kindHang)
	checkUpdate(t, s, id, webhooks.UpdateSave, func(c *webhooks.Consumer) {
		c.State = webhooks.StateFailed
		c.FailingSince = time.Now().Add(-4 * time.Second)
	})
	if got := s.collected(); len(got) != 1 || got[kindHang] != 1 {
		t.Fatalf("collected %v, want one hang", got)
	}
	if got := v.list(); len(got) != 0 {
		t.Fatalf("violations %q", got)
	}
}

// TestViolationsAreBounded checks that a flood of violations is counted
// but kept only in part.
func TestViolationsAreBounded(t *testing.T) {
	v := &violations{}
	for range maxViolationMessages + 5 {
		v.add("broken")
	}
	got := v.list()
	if len(got) != maxViolationMessages+1 || got[len(got)-1] != "... and 5 more" {
		t.Fatalf("got %d messages ending %q", len(got), got[len(got)-1])
	}
}

// TestAckLedgerKeepsHighest checks that an older ack answered later does
// not lower what the ledger expects the Store to hold.
func TestAckLedgerKeepsHighest(t *testing.T) {
	l := newAckLedger()
	l.record("c", "/s", "0000000000000000_0000000000000020")
	l.record("c", "/s", "0000000000000000_0000000000000010")
	if got, _ := l.get("c", "/s"); got != "0000000000000000_0000000000000020" {
		t.Fatalf("ledger holds %s", got)
	}
	if _, ok := l.get("c", "/other"); ok {
		t.Fatal("ledger holds an ack never made")
	}
	if l.total() != 2 {
		t.Fatalf("total %d, want 2", l.total())
	}
}

// TestSampleCountsConnections checks that a loopback connection shows as
// two established connections and three descriptors, and that closing it
// returns the counts.
func TestSampleCountsConnections(t *testing.T) {
	before := takeSample()
	if before.Conns < 0 {
		t.Skip("no /proc: connections cannot be counted here")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	during := takeSample()
	if during.Conns != before.Conns+2 || during.FDs != before.FDs+3 {
		t.Fatalf("with one loopback connection: %+v, before %+v", during, before)
	}
	client.Close()
	server.Close()
	ln.Close()
	if after := takeSample(); after.Conns != before.Conns || after.FDs != before.FDs {
		t.Fatalf("after closing: %+v, before %+v", after, before)
	}
}

// TestMixSplit checks that every consumer gets a kind and the failing ones
// are spread over the three failures.
func TestMixSplit(t *testing.T) {
	got := Mix{Healthy: 60, Slow: 20, Failing: 20}.split(2000)
	want := [numKinds]int{kindHealthy: 900, kindDone: 300, kindSlow: 400, kindFail5xx: 134, kindReset: 133, kindHang: 133}
	if got != want {
		t.Fatalf("split %v, want %v", got, want)
	}
	if _, err := ParseMix("1,2"); err == nil {
		t.Fatal("ParseMix accepted two weights")
	}
	if _, err := ParseMix("0,0,0"); err == nil {
		t.Fatal("ParseMix accepted zero weights")
	}
	if m, err := ParseMix(" 7, 2,1"); err != nil || m != (Mix{7, 2, 1}) {
		t.Fatalf("ParseMix = %v, %v", m, err)
	}
}

// TestSoakReportsUnsettled checks that a run whose drain ends before the
// failing consumers can be collected fails, rather than passing on the
// figures alone.
func TestSoakReportsUnsettled(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Consumers = 30
	cfg.Mix = Mix{Failing: 1}
	cfg.Load = 500 * time.Millisecond
	cfg.AppendRate = 100
	cfg.Drain = time.Millisecond
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Fatal("a run that ended with failing consumers uncollected passed")
	}
	if !strings.Contains(strings.Join(rep.Violations, "\n"), "not collected") {
		t.Fatalf("violations %q name no uncollected consumer", rep.Violations)
	}
}
