package webhooks

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"golang.org/x/time/rate"
)

// While the Store cannot be reached every API request fails, so the log
// of those failures is sampled: outageLogBurst lines at once, then one per
// outageLogEvery, each counting the ones not logged before it.
const (
	outageLogBurst = 5
	outageLogEvery = time.Second
)

// outageLog logs API requests that failed because the Store could not be
// reached, sampled.
type outageLog struct {
	log   *slog.Logger
	clock clock.Clock

	mu      sync.Mutex
	sampler sampler
}

func newOutageLog(log *slog.Logger, clk clock.Clock) *outageLog {
	return &outageLog{log: log, clock: clk, sampler: sampler{limiter: rate.NewLimiter(rate.Every(outageLogEvery), outageLogBurst)}}
}

// failed logs that r failed with err, unless too many did lately.
func (l *outageLog) failed(r *http.Request, err error) {
	l.mu.Lock()
	allowed, suppressed := l.sampler.take(l.clock.Now())
	l.mu.Unlock()
	if !allowed {
		return
	}
	attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error())}
	if suppressed > 0 {
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	l.log.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelError, "webhooks: request failed: store unavailable", attrs...)
}
