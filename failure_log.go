package webhooks

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"golang.org/x/time/rate"
)

// Each subscription may log failureLogBurst failed attempts at once, then
// one per failureLogEvery; the rest are counted and the count is logged
// with the next line. A webhook that is down fails every consumer of its
// subscription, and the log must not grow with their number.
const (
	failureLogBurst = 10
	failureLogEvery = 6 * time.Second
	// failureLogIdle is how long after its last failure a subscription's
	// bucket is full again, so a fresh one would behave the same.
	failureLogIdle = failureLogBurst * failureLogEvery
)

// failureLog logs failed delivery attempts at Warn, sampled per
// subscription. It holds one bucket per subscription that failed in the
// last failureLogIdle, no more.
type failureLog struct {
	log   *slog.Logger
	clock clock.Clock

	mu    sync.Mutex
	subs  map[string]*failureBucket
	swept time.Time
	// failing counts, per subscription, the attempts failed since its
	// last success, so that the first success after them is logged at
	// Info. A subscription deleted while failing leaves its entry.
	failing map[string]int
}

// failureBucket samples the failure lines of one subscription.
type failureBucket struct {
	sampler
	last time.Time // of the last failure
}

// sampler lets log lines through at a limiter's rate and counts the ones
// it holds back, for the next line that goes through to report.
type sampler struct {
	limiter    *rate.Limiter
	suppressed int // lines not logged since the last one that was
}

// take reports whether a line at now may be logged and, if so, how many
// were held back before it.
func (s *sampler) take(now time.Time) (allowed bool, suppressed int) {
	if !s.limiter.AllowN(now, 1) {
		s.suppressed++
		return false, 0
	}
	suppressed, s.suppressed = s.suppressed, 0
	return true, suppressed
}

func newFailureLog(log *slog.Logger, clk clock.Clock) *failureLog {
	return &failureLog{log: log, clock: clk, subs: make(map[string]*failureBucket), swept: clk.Now(), failing: make(map[string]int)}
}

// failed logs that the attempt c was sent for failed with f, unless c's
// subscription has logged too many lines lately. stored is the consumer as
// stored once the failure was recorded, nil if it is gone.
func (l *failureLog) failed(ctx context.Context, c *Consumer, f *deliveryFailure, stored *Consumer) {
	now := l.clock.Now()
	l.mu.Lock()
	idle := l.sweep(now)
	b := l.subs[c.SubscriptionID]
	if b == nil {
		b = &failureBucket{sampler: sampler{limiter: rate.NewLimiter(rate.Every(failureLogEvery), failureLogBurst)}}
		l.subs[c.SubscriptionID] = b
	}
	b.last = now
	allowed, suppressed := b.take(now)
	l.failing[c.SubscriptionID]++
	l.mu.Unlock()

	for sub, n := range idle {
		l.log.WarnContext(ctx, "webhooks: delivery failures not logged", "subscription_id", sub, "suppressed", n)
	}
	if !allowed {
		return
	}
	attrs := append(attemptAttrs(c), slog.String("error_class", string(f.class)))
	if f.err != nil {
		attrs = append(attrs, slog.String("error", f.detail()))
	} else {
		attrs = append(attrs, slog.Int("status", f.status))
	}
	switch {
	case stored != nil && stored.State == StateFailed:
		attrs = append(attrs, slog.Bool("dead_letter", true))
	case retryScheduled(c, stored):
		attrs = append(attrs, slog.Time("next_retry", stored.Deadline))
	}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	l.log.LogAttrs(ctx, slog.LevelWarn, "webhooks: delivery attempt failed", attrs...)
}

// sweep forgets the buckets of subscriptions idle for failureLogIdle, at
// most once per failureLogIdle, and returns the counts of lines they
// suppressed and never reported.
func (l *failureLog) sweep(now time.Time) map[string]int {
	if now.Sub(l.swept) < failureLogIdle {
		return nil
	}
	l.swept = now
	var idle map[string]int
	for sub, b := range l.subs {
		if now.Sub(b.last) < failureLogIdle {
			continue
		}
		if b.suppressed > 0 {
			if idle == nil {
				idle = make(map[string]int)
			}
			idle[sub] = b.suppressed
		}
		delete(l.subs, sub)
	}
	return idle
}

// retryScheduled reports whether stored, the consumer an attempt was sent
// for as c, waits for a retry of that attempt's wake at its deadline. The
// WAKING timeout may have scheduled it before the POST ended; once the
// retry is in flight, or the wake over, there is none to report.
func retryScheduled(c, stored *Consumer) bool {
	return stored != nil && stored.State == stateDelivering && !stored.InFlight &&
		stored.Epoch == c.Epoch && stored.WakeID == c.WakeID && !stored.Deadline.IsZero()
}

// attemptAttrs are the fields of every line about the attempt c was sent
// for.
func attemptAttrs(c *Consumer) []slog.Attr {
	return []slog.Attr{
		slog.String("subscription_id", c.SubscriptionID),
		slog.String("consumer_id", c.ID),
		slog.Int("attempt", c.Attempt),
	}
}

// succeeded logs that the attempt c was sent for succeeded, with resp: at
// Info if it is its subscription's first success after failures, else at
// Debug, with the fields of a failure's line.
func (l *failureLog) succeeded(ctx context.Context, c *Consumer, resp response) {
	l.mu.Lock()
	failed := l.failing[c.SubscriptionID]
	delete(l.failing, c.SubscriptionID)
	l.mu.Unlock()
	level, msg := slog.LevelDebug, "webhooks: delivery attempt succeeded"
	if failed > 0 {
		level, msg = slog.LevelInfo, "webhooks: deliveries recovered"
	}
	if !l.log.Enabled(ctx, level) {
		return
	}
	attrs := append(attemptAttrs(c), slog.String("outcome", resp.outcome), slog.Duration("latency", resp.latency))
	if resp.status != 0 {
		attrs = append(attrs, slog.Int("status", resp.status))
	}
	if failed > 0 {
		attrs = append(attrs, slog.Int("failed_attempts", failed))
	}
	l.log.LogAttrs(ctx, level, msg, attrs...)
}
