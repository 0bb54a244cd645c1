package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/internal/pgtest"
)

// TestInstancesShareOneDatabase runs three servers on one database. A
// subscription created through the first wakes the consumer of a stream
// created and appended through the second, whose callbacks the third
// accepts; a long-poll on one server sees an append made through another.
// Then, under appends and callbacks spread over all three, every consumer
// gets exactly one webhook per wake (the receiver answers each at once, so
// no attempt is retried) and catches up.
func TestInstancesShareOneDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	w := newWorld(t, 3, pgtest.SchemaDSN(t))
	// Long timeouts: on a loaded machine a slow answer must not count as a
	// lost attempt, which would be retried.
	w.waking, w.liveness = 30*time.Second, 30*time.Second
	w.start()
	one, two, three := w.procs[0].base, w.procs[1].base, w.procs[2].base

	w.subscribeOn(one, "all", "/crash/*")
	// The other servers learn of the subscription through the database's
	// feed. A stream server 2 created before then would get a consumer only
	// at its next append (SubscriptionFeed's window), so the stream waits.
	w.waitLearned("all", 2)
	w.callbacksTo.Store(2)
	w.createStreamOn(two, "/crash/s1")
	require.NoError(t, w.appendEventOn(two, "/crash/s1", 1))
	id := webhooks.ConsumerID("all", "/crash/s1")
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.acked[id]["/crash/s1"] != "" && w.acked[id]["/crash/s1"] >= w.appended["/crash/s1"]
	}, 20*time.Second, 10*time.Millisecond, "the consumer of a stream made through server 2 was not woken, or server 3 refused its callbacks")
	store, closeStore := w.openStore()
	defer closeStore()
	require.Eventually(t, func() bool {
		c, err := store.GetConsumer(context.Background(), id)
		return err == nil && c.State == webhooks.StateIdle
	}, 20*time.Second, 10*time.Millisecond, "the consumer did not finish its wake through server 3")

	// A long-poll on server 1 returns the append made through server 3.
	tail, err := w.tailOn(one, "/crash/s1")
	require.NoError(t, err)
	polled := make(chan string, 1)
	go func() {
		resp, err := w.client.Get(one + "/crash/s1?live=long-poll&offset=" + tail)
		if err != nil {
			polled <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		polled <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	// The append goes out after the poll has had time to start waiting; if
	// it lands first, the poll returns it at once, which passes too.
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, w.appendEventOn(three, "/crash/s1", 42))
	select {
	case got := <-polled:
		require.Equal(t, `200 [{"n":42}]`, got)
	case <-time.After(10 * time.Second):
		t.Fatal("a long-poll on server 1 did not see an append through server 3")
	}

	// Load: appends and callbacks spread over the three servers.
	w.subscribeOn(three, "one", "/crash/s1")
	w.callbacksTo.Store(-1)
	for i := 2; i <= crashStreams; i++ {
		w.createStream(fmt.Sprintf("/crash/s%d", i))
	}
	stop := w.writeContinuously()
	time.Sleep(3 * time.Second)
	stop()
	w.waitCaughtUp()
	w.mu.Lock()
	defer w.mu.Unlock()
	for consumer, epochs := range w.posts {
		for epoch, n := range epochs {
			require.Equal(t, 1, n, "consumer %s got %d webhooks for epoch %d", consumer, n, epoch)
		}
	}
	require.Empty(t, w.refused)
}

// TestKilledInstanceIsTakenOver kills one of three servers with SIGKILL
// while consumers it woke are WAKING (their webhook hangs), LIVE (claimed,
// acked, then silent) or failing (retries due). The two survivors act on
// each of those deadlines within one timeout of it, and no acked offset is
// lost.
func TestKilledInstanceIsTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three server processes")
	}
	w := newWorld(t, 3, pgtest.SchemaDSN(t))
	w.start()
	first := w.procs[0].base
	w.modes["hang"], w.modes["live"], w.modes["fail"] = hang, claimAndAck, fail
	var streams []string
	for _, sub := range []string{"hang", "live", "fail"} {
		w.subscribeOn(first, sub, "/"+sub+"/*")
		for i := 1; i <= 3; i++ {
			path := fmt.Sprintf("/%s/s%d", sub, i)
			streams = append(streams, path)
			w.createStreamOn(first, path)
			require.NoError(t, w.appendEventOn(first, path, i))
		}
	}
	store, closeStore := w.openStore()
	defer closeStore()
	ctx := context.Background()
	consumer := func(path string) *webhooks.Consumer {
		sub := strings.SplitN(path, "/", 3)[1]
		c, err := store.GetConsumer(ctx, webhooks.ConsumerID(sub, path))
		require.NoError(t, err)
		return c
	}
	// Wait until each consumer is where the kill should find it.
	require.Eventually(t, func() bool {
		for _, path := range streams {
			c := consumer(path)
			switch sub := strings.SplitN(path, "/", 3)[1]; {
			case sub == "hang" && !(c.State == webhooks.StateWaking && c.InFlight):
				return false
			case sub == "live" && c.State != webhooks.StateLive:
				return false
			case sub == "fail" && c.Failures == 0:
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "the consumers did not reach WAKING, LIVE and failing")

	w.killProc(0)
	killed := time.Now()
	before := map[string]*webhooks.Consumer{}
	for _, path := range streams {
		before[path] = consumer(path)
	}
	// Each deadline is acted on within one timeout of it (or of the kill,
	// for deadlines already passed): the consumer's state moves on. All
	// are watched at once, and each is checked against its own limit.
	limits := map[string]time.Time{}
	var last time.Time
	for _, path := range streams {
		due := before[path].Deadline
		if due.Before(killed) {
			due = killed
		}
		limits[path] = due.Add(w.waking)
		if limits[path].After(last) {
			last = limits[path]
		}
	}
	moved := map[string]time.Time{}
	for len(moved) < len(streams) && time.Now().Before(last.Add(time.Second)) {
		for _, path := range streams {
			b, c := before[path], consumer(path)
			if _, ok := moved[path]; !ok && (c.Epoch != b.Epoch || c.Attempt != b.Attempt || c.State != b.State ||
				c.Failures != b.Failures || !c.Deadline.Equal(b.Deadline)) {
				moved[path] = time.Now()
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, path := range streams {
		b := before[path]
		at, ok := moved[path]
		require.True(t, ok, "%s (%s): its deadline %v was never acted on", path, b.State, b.Deadline)
		require.False(t, at.After(limits[path]), "%s (%s): its deadline %v was acted on %v after it, more than %v",
			path, b.State, b.Deadline, at.Sub(b.Deadline), w.waking)
		t.Logf("%s (%s): acted on %v after its deadline", path, b.State, at.Sub(b.Deadline).Round(time.Millisecond))
	}
	// The LIVE consumers' acks survived the kill and the takeover.
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, path := range streams {
		id := webhooks.ConsumerID(strings.SplitN(path, "/", 3)[1], path)
		c := consumer(path)
		for _, s := range c.Streams {
			require.GreaterOrEqual(t, s.Offset, w.acked[id][s.Path], "%s's ack of %s was lost", id, s.Path)
		}
	}
}

// TestRollingRestartOfInstances restarts three servers on one database one
// at a time, gracefully, while events are appended through all of them and
// consumers call back on any. No subscription, consumer or acked offset is
// lost, and every consumer catches up (L1).
func TestRollingRestartOfInstances(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and restarts three server processes")
	}
	w := newWorld(t, 3, pgtest.SchemaDSN(t))
	w.start()
	for id, pattern := range crashSubs {
		w.subscribe(id, pattern)
	}
	for i := 1; i <= crashStreams; i++ {
		w.createStream(fmt.Sprintf("/crash/s%d", i))
	}
	stop := w.writeContinuously()
	for i := range w.procs {
		w.waitWebhooks(5)
		w.stopProc(i, syscall.SIGTERM)
		w.checkDurableState()
		w.startProc(i)
	}
	w.waitWebhooks(5)
	stop()
	w.waitCaughtUp()
	w.checkDurableState()
	w.checkNoTokenRefused()
}

// waitWebhooks waits until n more webhooks have arrived.
func (w *crashWorld) waitWebhooks(n int) {
	w.t.Helper()
	count := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		total := 0
		for _, epochs := range w.posts {
			for _, k := range epochs {
				total += k
			}
		}
		return total
	}
	start := count()
	require.Eventually(w.t, func() bool { return count() >= start+n }, 20*time.Second, 10*time.Millisecond,
		"fewer than %d webhooks arrived", n)
}

// waitLearned waits until n servers other than the one that created
// subscription id have logged that they learned of it from the database.
func (w *crashWorld) waitLearned(id string, n int) {
	w.t.Helper()
	learned := fmt.Sprintf("through another engine\" added=[%s]", id)
	require.Eventually(w.t, func() bool {
		return w.logs.count(learned) >= n
	}, 20*time.Second, 10*time.Millisecond, "%d servers did not learn of subscription %s", n, id)
}
