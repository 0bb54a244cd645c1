package main

import (
	"context"
	"fmt"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// notify starts c.instances engines on schema and creates c.changes
// subscriptions one after another through the first one's Store: each
// create notifies every engine, which reloads every subscription
// (WatchSubscriptions). It reports how many reloads that took and what
// each cost.
func notify(ctx context.Context, c config) error {
	var envs []*env
	for range c.instances {
		e, err := openEnv(ctx, c, c.schema)
		if err != nil {
			return err
		}
		defer e.close()
		if _, _, err := e.start(ctx); err != nil {
			return err
		}
		envs = append(envs, e)
	}
	// One reload alone, timed through the Store as the engine calls it.
	t := time.Now()
	subs, err := envs[0].store.Store.ListSubscriptions(ctx)
	if err != nil {
		return err
	}
	one := time.Since(t)
	before := make([]int64, len(envs))
	for i, e := range envs {
		before[i] = e.store.lists.Load()
	}
	cpu0 := cpu()
	t = time.Now()
	for i := range c.changes {
		if i == c.changes-1 {
			for _, e := range envs {
				e.store.listsAfter.Store(time.Now().UnixNano())
			}
		}
		id := fmt.Sprintf("notify-%d", i)
		err := envs[0].store.CreateSubscription(ctx, &webhooks.Subscription{ID: id, Pattern: "/notify/" + id + "/*", Webhook: seedWebhook, Secret: "capacity-secret-0123456789abcdef", CreatedAt: time.Now()})
		if err != nil {
			return err
		}
	}
	created := time.Since(t)
	// Every engine has seen the last create once a reload that started
	// after the create did has ended (or one just before its commit, and
	// then the create's own notification brings one more).
	for _, e := range envs {
		for !e.store.listedAfter.Load() {
			time.Sleep(time.Millisecond)
		}
	}
	settled := time.Since(t)
	var reloads int64
	for i, e := range envs {
		reloads += e.store.lists.Load() - before[i]
	}
	fmt.Printf("CAPACITY notify schema=%s subs=%d instances=%d changes=%d reload_ms=%.1f create_ms=%.2f settled_s=%.2f reloads=%d reloads_per_change_per_instance=%.2f cpu_ms_per_change=%.1f\n",
		c.schema, len(subs), c.instances, c.changes, ms(one), ms(created)/float64(c.changes), settled.Seconds(), reloads,
		float64(reloads)/float64(c.changes*c.instances), ms(cpu()-cpu0)/float64(c.changes))
	for i := range c.changes {
		if err := envs[0].store.DeleteSubscription(ctx, fmt.Sprintf("notify-%d", i)); err != nil {
			return err
		}
	}
	return nil
}
