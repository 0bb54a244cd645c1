package sqlitestore

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
)

// TestDSStatementsUseIndexes runs every DSStore method and then asks
// SQLite for the plan of each statement they prepared: none may scan
// ds_links, whose rows number the subscriptions' links, and only the
// listing of every subscription may scan ds_subscriptions. It is the
// structural half of "an ack, a wake or a link costs what it touches";
// storetest.BenchmarkDSCost is the measured half.
func TestDSStatementsUseIndexes(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "hooks.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	ctx := t.Context()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	off := func(n int) string { return strings.Repeat("0", 15) + string(rune('0'+n)) }
	sub := &webhooks.DSSubscription{ID: "s", Type: webhooks.DSPullWake, Pattern: "**", ConfigHash: "h", CreatedAt: t0}
	_, _, err = s.PutDSSubscription(ctx, &webhooks.PutDSSubscriptionParams{Subscription: sub,
		Links: []webhooks.DSLinkSpec{{Path: "a", Type: webhooks.DSLinkGlob, Offset: off(1)}}})
	require.NoError(t, err)
	require.NoError(t, s.LinkDSStreams(ctx, &webhooks.LinkDSStreamsParams{ID: "s", Links: []webhooks.DSLinkSpec{{Path: "b", Type: webhooks.DSLinkExplicit, Offset: off(1)}}}))
	require.NoError(t, s.UnlinkDSStream(ctx, &webhooks.UnlinkDSStreamParams{ID: "s", Path: "b"}))
	_, err = s.NoteDSAppend(ctx, &webhooks.NoteDSAppendParams{Path: "a", Tail: off(3), Now: t0})
	require.NoError(t, err)
	for _, p := range []webhooks.ListDSLinksParams{{ID: "s", Limit: 1}, {ID: "s", Limit: 1, PendingOnly: true}, {ID: "s", Paths: []string{"a"}}} {
		_, err = s.ListDSLinks(ctx, &p)
		require.NoError(t, err)
	}
	_, err = s.GetDSSubscription(ctx, "s")
	require.NoError(t, err)
	_, err = s.ListDSSubscriptions(ctx)
	require.NoError(t, err)
	_, err = s.UpdateDSCursor(ctx, "s", func(c *webhooks.DSCursor) error { c.DueAt = t0; return nil })
	require.NoError(t, err)
	c, err := s.ClaimDS(ctx, &webhooks.ClaimDSParams{ID: "s", Worker: "w", WakeID: "k", Now: t0, LeaseUntil: t0.Add(time.Minute)})
	require.NoError(t, err)
	_, err = s.AckDS(ctx, &webhooks.AckDSParams{ID: "s", Generation: c.Generation, WakeID: "k", Now: t0, Acks: []webhooks.DSAck{{Path: "a", Offset: off(2)}}, Done: true})
	require.NoError(t, err)
	c, err = s.ClaimDS(ctx, &webhooks.ClaimDSParams{ID: "s", Worker: "w", WakeID: "k2", Now: t0, LeaseUntil: t0.Add(time.Minute)})
	require.NoError(t, err)
	_, err = s.ReleaseDS(ctx, &webhooks.ReleaseDSParams{ID: "s", Generation: c.Generation, WakeID: "k2", Now: t0})
	require.NoError(t, err)
	_, err = s.DueDSSubscriptions(ctx, t0, 10)
	require.NoError(t, err)
	_, _, err = s.NextDSDeadline(ctx)
	require.NoError(t, err)
	require.NoError(t, s.DropDSStream(ctx, "a"))
	require.NoError(t, s.DeleteDSSubscription(ctx, "s"))

	var queries []string
	for q := range s.w.stmts {
		queries = append(queries, q)
	}
	s.r.mu.Lock()
	for q := range s.r.stmts {
		queries = append(queries, q)
	}
	s.r.mu.Unlock()
	scanLinks := regexp.MustCompile(`^SCAN (ds_links|l)\b`)
	scanSubs := regexp.MustCompile(`^SCAN (ds_subscriptions|s)\b`)
	// A search by subscription alone reads every link of it, unless it
	// is the partial index of the pending ones.
	allLinks := regexp.MustCompile(`^SEARCH (ds_links|l) USING (PRIMARY KEY|(COVERING )?INDEX (\w+)) \(subscription_id=\?\)$`)
	// A statement that selects pending links by subscription reads
	// them from the partial index: the primary key from a path on
	// filters every link after it.
	pendingBySub := regexp.MustCompile(`^SEARCH (ds_links|l) USING (PRIMARY KEY|(COVERING )?INDEX (\w+)) \(subscription_id=\?`)
	param := regexp.MustCompile(`\?(\d*)`)
	checked := 0
	for _, q := range queries {
		if !strings.Contains(q, "ds_") {
			continue
		}
		checked++
		// The plan is made without the values: each parameter is NULL.
		n := 0
		for _, m := range param.FindAllStringSubmatch(q, -1) {
			if m[1] == "" {
				n++
			} else if k, _ := strconv.Atoi(m[1]); k > n {
				n = k
			}
		}
		rows, err := s.r.db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, make([]any, n)...)
		require.NoError(t, err, q)
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			plan = append(plan, detail)
		}
		require.NoError(t, rows.Err())
		rows.Close()
		listAll := strings.Contains(q, "WHERE s.deleted = 0 ORDER BY s.id")
		for _, step := range plan {
			require.False(t, scanLinks.MatchString(step), "%s\nscans the links: %v", q, plan)
			require.False(t, !listAll && scanSubs.MatchString(step), "%s\nscans the subscriptions: %v", q, plan)
			if m := pendingBySub.FindStringSubmatch(step); m != nil && strings.Contains(q, "pending = 1") {
				require.Equal(t, "ds_links_pending", m[4], "%s\nreads pending links from another index: %v", q, plan)
			}
			if m := allLinks.FindStringSubmatch(step); m != nil && m[4] != "ds_links_pending" {
				require.True(t, strings.HasPrefix(q, "DELETE FROM ds_links WHERE subscription_id = ?"), "%s\nreads every link of a subscription: %v", q, plan)
			}
		}
	}
	require.GreaterOrEqual(t, checked, 20, "the DS statements were prepared and checked")
}
