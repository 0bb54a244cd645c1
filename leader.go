package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/streamhooks/webhooks/internal/startstop"
)

// metricsLease names the lease whose holder reports the Store-wide gauge.
const metricsLease = "metrics"

// minLeaseRenewal is the shortest interval between renewals of a lease. A
// lease is granted for three intervals, so its holder keeps it through two
// failed renewals.
const minLeaseRenewal = 5 * time.Second

// lease is this engine instance's claim to one lease of a Leaser Store. A
// nil *lease stands for a Store without the capability, whose one engine
// holds every lease.
type lease struct {
	startstop.Base
	store   Leaser
	name    string
	holder  string // this instance's random ID
	renewal time.Duration
	clock   clock.Clock
	log     *slog.Logger
	// until is the UnixNano the lease is held until, or 0.
	until atomic.Int64
	// held is whether the lease was held at the last try, so that gaining
	// and losing it are logged once. Start's first try sets it, then only
	// the renewing goroutine.
	held bool
}

// newLease returns this instance's claim to the lease name of store, or nil
// if store is no Leaser. It is renewed every poll interval, but not more
// often than minLeaseRenewal: an engine that looks at the Store seldom
// renews as seldom.
func newLease(store Store, name string, cfg *config) *lease {
	leaser, ok := store.(Leaser)
	if !ok {
		return nil
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return &lease{
		store:   leaser,
		name:    name,
		holder:  hex.EncodeToString(id),
		renewal: max(cfg.pollInterval, minLeaseRenewal),
		clock:   cfg.clock,
		log:     cfg.logger,
	}
}

// holds reports whether this instance holds the lease now, by its own
// clock: a holder that could not renew stops counting itself one before
// the Store would grant the lease to another.
func (l *lease) holds() bool {
	if l == nil {
		return true
	}
	until := l.until.Load()
	return until != 0 && l.clock.Now().UnixNano() < until
}

// Start tries for the lease with ctx, so that a started engine knows at
// once whether it holds it, and then renews it in a goroutine until Stop,
// which releases it.
func (l *lease) Start(ctx context.Context) {
	if l == nil {
		return
	}
	run, ok, stopped := l.StartInit(context.WithoutCancel(ctx))
	if !ok {
		return
	}
	// Made before Start returns, so no tick of a mock clock is missed.
	ticker := l.clock.Ticker(l.renewal)
	l.renew(ctx)
	go func() {
		defer stopped()
		defer ticker.Stop()
		for {
			select {
			case <-run.Done():
				l.release(run)
				return
			case <-ticker.C:
				l.renew(run)
			}
		}
	}()
}

// Stop stops renewing the lease, and releases it.
func (l *lease) Stop() {
	if l != nil {
		l.Base.Stop()
	}
}

// renew asks the Store for the lease for three renewal intervals. After an
// error it keeps the term it had, which lapses unless a later renewal
// succeeds.
func (l *lease) renew(ctx context.Context) {
	now := l.clock.Now()
	until := now.Add(3 * l.renewal)
	ok, err := l.store.TryLease(ctx, l.name, l.holder, now, until)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			l.log.ErrorContext(ctx, "webhooks: renewing a lease", "lease", l.name, "error", err)
		}
	case ok:
		l.until.Store(until.UnixNano())
	default:
		l.until.Store(0)
	}
	l.logChange(ctx, l.holds())
}

// release gives the lease up, so that another instance takes it at its
// next renewal rather than when the term ends. It waits one renewal
// interval at most: after that, letting the term run out costs little more.
func (l *lease) release(ctx context.Context) {
	l.until.Store(0)
	l.logChange(ctx, false)
	ctx, cancel := l.clock.WithTimeout(context.WithoutCancel(ctx), l.renewal)
	defer cancel()
	if err := l.store.ReleaseLease(ctx, l.name, l.holder); err != nil {
		l.log.ErrorContext(ctx, "webhooks: releasing a lease", "lease", l.name, "error", err)
	}
}

// logChange logs when this instance gains or loses the lease.
func (l *lease) logChange(ctx context.Context, held bool) {
	switch {
	case held && !l.held:
		l.log.InfoContext(ctx, "webhooks: this instance gained a lease", "lease", l.name, "instance", l.holder)
	case !held && l.held:
		l.log.InfoContext(ctx, "webhooks: this instance lost a lease", "lease", l.name, "instance", l.holder)
	}
	l.held = held
}
