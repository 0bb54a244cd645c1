package webhooks

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A subscription's rate limit (max_deliveries_per_minute) is a token
// bucket per engine that holds a minute's deliveries and refills at the
// limit: a burst may send up to a minute's worth at once, and the
// deliveries past it wait their turn, each scheduled for the time its
// token comes, never dropped. Each engine sharing a Store keeps its own
// bucket, so across n engines a subscription gets up to n times its limit.

// heldTurnTTL is how long a reserved turn is kept for a consumer whose
// deferred attempt another engine may have sent instead.
const heldTurnTTL = time.Minute

// rateLimits holds this engine's buckets, and the turns reserved for
// deferred attempts.
type rateLimits struct {
	mu      sync.Mutex
	buckets map[string]*bucket   // subscription ID → its bucket
	held    map[string]time.Time // consumer ID → the turn it reserved
	swept   time.Time
}

// bucket is a subscription's limiter at the limit it was made for.
type bucket struct {
	perMinute int
	lim       *rate.Limiter
}

// turn returns how long the attempt of consumer id, of sub, must wait for
// its turn at now: zero to go now. A positive wait reserves the turn; the
// attempt sent at that time goes without taking another.
func (r *rateLimits) turn(sub *Subscription, id string, now time.Time) time.Duration {
	if sub.RateLimit <= 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweep(now)
	if at, ok := r.held[id]; ok {
		if now.Before(at) {
			return at.Sub(now)
		}
		delete(r.held, id)
		return 0
	}
	b := r.buckets[sub.ID]
	if b == nil || b.perMinute != sub.RateLimit {
		b = &bucket{perMinute: sub.RateLimit, lim: rate.NewLimiter(rate.Limit(float64(sub.RateLimit)/60), sub.RateLimit)}
		if r.buckets == nil {
			r.buckets, r.held = make(map[string]*bucket), make(map[string]time.Time)
		}
		r.buckets[sub.ID] = b
	}
	wait := b.lim.ReserveN(now, 1).DelayFrom(now)
	if wait > 0 {
		r.held[id] = now.Add(wait)
	}
	return wait
}

// sweep forgets, at most once a heldTurnTTL, the turns long past: their
// attempts went through another engine, or their consumers are gone.
func (r *rateLimits) sweep(now time.Time) {
	if now.Sub(r.swept) < heldTurnTTL {
		return
	}
	r.swept = now
	for id, at := range r.held {
		if now.Sub(at) > heldTurnTTL {
			delete(r.held, id)
		}
	}
}

// deferAttempt puts back attempt c, which a transition marked as sent, to
// be sent after wait, its turn under its subscription's rate limit: the
// attempt is not counted, and c waits as for a retry.
func (p *pipeline) deferAttempt(ctx context.Context, c *Consumer, sub *Subscription, wait time.Duration) {
	_, err := p.core.update(ctx, c.ID, func(cur *Consumer) (change, error) {
		return p.core.rules.deferAttempt(cur, c, sub, p.clock.Now().Add(wait)), nil
	})
	if err != nil && !errors.Is(err, ErrConsumerNotFound) && ctx.Err() == nil {
		// The attempt stays in flight, times out and is retried.
		p.log.ErrorContext(ctx, "webhooks: deferring a rate-limited delivery", "consumer_id", c.ID, "error", err)
	}
}
