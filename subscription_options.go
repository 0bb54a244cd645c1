package webhooks

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Subscription options that apply to every delivery mode: how deliveries
// are signed, retried and rate limited. In the API their JSON sits beside
// the event-push options.

// DefaultEventsRateLimit is the default max_deliveries_per_minute of an
// event-push subscription created through the API: a safety net a receiver
// in normal use does not reach, since each host's lane already bounds the
// POSTs in flight. Wake subscriptions have no limit by default (spec 001
// has none): one consumer per stream, under a per-subscription limit, would
// wake a pattern's streams a few a second. Handler subscriptions, created
// in Go, have the limit they are given.
const DefaultEventsRateLimit = 60_000

// Limits on the options; a request past one is refused with 400
// INVALID_REQUEST and a message naming the limit.
const (
	maxRetrySchedule  = 32
	maxRetryWait      = 24 * time.Hour
	maxAttemptsLimit  = 1000
	maxRetryAge       = 30 * 24 * time.Hour
	maxRateLimit      = 1_000_000
	deliverPolicyNew  = "new"
	deliverPolicyAll  = "all"
	deliverPolicyFrom = "from_offset"
)

// retryJSON is the "retry" object. In a request a missing field keeps its
// default, or on PATCH its value; a response shows the policy in force.
type retryJSON struct {
	ScheduleMS  []int64 `json:"schedule_ms,omitempty"`
	MaxAttempts *int    `json:"max_attempts,omitempty"`
	MaxAgeMS    *int64  `json:"max_age_ms,omitempty"`
	// ClientErrors and OnExhausted are RetryPolicy's fields of those
	// names.
	ClientErrors ClientErrorPolicy `json:"client_errors,omitempty"`
	OnExhausted  ExhaustedAction   `json:"on_exhausted,omitempty"`
}

// optionsJSON holds the mode-independent options of a subscription request
// or response.
type optionsJSON struct {
	Signature              SignatureScheme `json:"signature,omitempty"`
	Retry                  *retryJSON      `json:"retry,omitempty"`
	MaxDeliveriesPerMinute *int            `json:"max_deliveries_per_minute,omitempty"`
}

// applyTo sets the options o gives on s, over what s has.
func (o *optionsJSON) applyTo(s *Subscription) error {
	if r := o.Retry; r != nil {
		p := RetryPolicy{}
		if s.Retry != nil {
			p = *s.Retry
		}
		if r.ScheduleMS != nil {
			p.Schedule = make([]time.Duration, len(r.ScheduleMS))
			for i, ms := range r.ScheduleMS {
				d, err := millis("retry.schedule_ms", ms)
				if err != nil {
					return err
				}
				p.Schedule[i] = d
			}
		}
		if r.MaxAttempts != nil {
			p.MaxAttempts = *r.MaxAttempts
		}
		if r.MaxAgeMS != nil {
			d, err := millis("retry.max_age_ms", *r.MaxAgeMS)
			if err != nil {
				return err
			}
			p.MaxAge = d
		}
		if r.ClientErrors != "" {
			p.ClientErrors = r.ClientErrors
		}
		if r.OnExhausted != "" {
			p.OnExhausted = r.OnExhausted
		}
		s.Retry = &p
	}
	if o.MaxDeliveriesPerMinute != nil {
		s.RateLimit = *o.MaxDeliveriesPerMinute
	}
	return nil
}

// millis converts field, a count of milliseconds, to a duration. It
// refuses a count too large for a duration, which would wrap around, maybe
// into the field's range (2^58 ms and a little became 1 s), before the
// field's own range is checked on the duration.
func millis(field string, ms int64) (time.Duration, error) {
	const most = math.MaxInt64 / int64(time.Millisecond)
	if ms > most || ms < -most {
		return 0, invalid(field, "%s %d is out of range", field, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// validateOptions checks the options of s against the API's limits, naming
// each by its JSON field.
func validateOptions(s *Subscription) error {
	switch s.Signature {
	case "", SignatureStreamhooks, SignatureStandard, SignatureEd25519:
	default:
		return invalid("signature", "unknown signature %q; use %q, %q or %q", s.Signature, SignatureStreamhooks, SignatureStandard, SignatureEd25519)
	}
	if s.RateLimit < 0 || s.RateLimit > maxRateLimit {
		return invalid("max_deliveries_per_minute", "max_deliveries_per_minute must be 0 (no limit) to %d", maxRateLimit)
	}
	if r := s.Retry; r != nil {
		if len(r.Schedule) > maxRetrySchedule {
			return invalid("retry.schedule_ms", "retry.schedule_ms has more than %d entries", maxRetrySchedule)
		}
		if slices.ContainsFunc(r.Schedule, func(d time.Duration) bool { return d < time.Millisecond || d > maxRetryWait }) {
			return invalid("retry.schedule_ms", "retry.schedule_ms entries must be 1 to %d", maxRetryWait.Milliseconds())
		}
		if r.MaxAttempts < 0 || r.MaxAttempts > maxAttemptsLimit {
			return invalid("retry.max_attempts", "retry.max_attempts must be 0 (no limit) to %d", maxAttemptsLimit)
		}
		if r.MaxAge < 0 || r.MaxAge > maxRetryAge {
			return invalid("retry.max_age_ms", "retry.max_age_ms must be 0 (no limit) to %d", maxRetryAge.Milliseconds())
		}
		switch r.ClientErrors {
		case "", RetryClientErrors, RetryTransientClientErrors, FailClientErrors:
		default:
			return invalid("retry.client_errors", "unknown retry.client_errors %q; use %q, %q or %q",
				r.ClientErrors, RetryClientErrors, RetryTransientClientErrors, FailClientErrors)
		}
		switch r.OnExhausted {
		case "", ExhaustedStop:
		case ExhaustedSkip:
			if !mechanismOf(s).skips() {
				return invalid("retry.on_exhausted", "retry.on_exhausted %q applies to event push only; a wake consumer stops", ExhaustedSkip)
			}
		default:
			return invalid("retry.on_exhausted", "unknown retry.on_exhausted %q; use %q or %q", r.OnExhausted, ExhaustedStop, ExhaustedSkip)
		}
	}
	if ev := s.Events; ev != nil {
		return validateEventsOptions(ev)
	}
	return nil
}

// optionsView is how the API shows the options of s, whose retry policy in
// force, its default included, is p.
func optionsView(s *Subscription, p RetryPolicy) optionsJSON {
	r := &retryJSON{MaxAttempts: &p.MaxAttempts, ClientErrors: cmp.Or(p.ClientErrors, RetryClientErrors),
		OnExhausted: cmp.Or(p.OnExhausted, ExhaustedStop)}
	age := p.MaxAge.Milliseconds()
	r.MaxAgeMS = &age
	for _, d := range p.Schedule {
		r.ScheduleMS = append(r.ScheduleMS, d.Milliseconds())
	}
	rate := s.RateLimit
	return optionsJSON{Signature: s.signature(), Retry: r, MaxDeliveriesPerMinute: &rate}
}

// signature is the scheme that signs s's deliveries.
func (s *Subscription) signature() SignatureScheme {
	if s.Signature == "" {
		return SignatureStreamhooks
	}
	return s.Signature
}

// validateOffset checks the form of an offset given to the API: that of
// an ack (validOffset: the source's OffsetValidator, or the protocol's
// rules), within MaxOffsetLength. OffsetNone always passes. Against a
// stream's tail, checkOffset checks the rest.
func validateOffset(source StreamSource, offset string) error {
	if offset == "" || len(offset) > MaxOffsetLength {
		return invalid("offset", "offset must be 1 to %d characters", MaxOffsetLength)
	}
	if r, ok := controlChar(offset); ok {
		return invalid("offset", "offset contains the control character %U", r)
	}
	if offset != OffsetNone && !validOffset(source, offset) {
		return invalid("offset", "offset %q is not an offset this server's streams produce", offset)
	}
	return nil
}

// healthJSON is a subscription's health as the API shows it (seed 002).
type healthJSON struct {
	ConsecutiveFailures int        `json:"consecutive_failures"`
	FailingSince        *time.Time `json:"failing_since"`
	LastSuccessAt       *time.Time `json:"last_success_at"`
	LastFailureAt       *time.Time `json:"last_failure_at"`
	LastFailureReason   string     `json:"last_failure_reason,omitempty"`
}

func healthView(h SubscriptionHealth) healthJSON {
	return healthJSON{
		ConsecutiveFailures: h.ConsecutiveFailures,
		FailingSince:        timeOrNil(h.FailingSince),
		LastSuccessAt:       timeOrNil(h.LastSuccessAt),
		LastFailureAt:       timeOrNil(h.LastFailureAt),
		LastFailureReason:   h.LastFailureReason,
	}
}

// timeOrNil is t, or nil for the zero time, which JSON shows as null.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
