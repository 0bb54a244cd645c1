package webhooks

import (
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"time"
)

// A Store keeps a subscription's fields beyond its columns as the value of
// MarshalData: a format version byte, then the fields in the order of
// MarshalData, as consumer data encodes them. Released versions never
// change; UnmarshalData reads every one of them, and an empty value, which
// a Store gives for a subscription stored before it kept one, as all
// fields zero.

// Subscription data versions: version 1 holds Delivery; version 2 adds
// Status and Events, whose MaxAttempts was then a field of the options;
// version 3 moves it to Retry and adds
// Signature, PreviousSecret, PreviousSecretExpiresAt, Retry and RateLimit;
// version 4 adds Handler at the end; version 5 adds after it, for event
// push, the filter's Expression and the Columns; version 6, which
// MarshalData writes, adds Tenant at the end, then the retry policy's
// ClientErrors and OnExhausted, then Name, UpdatedAt and Verification,
// then whether the subscription's existing streams were adopted.
const (
	subscriptionDataV1 = 1
	subscriptionDataV2 = 2
	subscriptionDataV3 = 3
	subscriptionDataV4 = 4
	subscriptionDataV5 = 5
	subscriptionDataV6 = 6
)

var errCorruptSubscriptionData = errors.New("webhooks: corrupt subscription data")

// MarshalData encodes the fields of s that a Store keeps no column for:
// every field but ID, Pattern, Webhook, Description, Secret, CreatedAt and
// Health. Name and UpdatedAt need no column, as no Store queries them. It fails for a time outside the years 1678 to 2262.
// Only Store implementations call it; applications never need to.
func (s *Subscription) MarshalData() ([]byte, error) {
	b := []byte{subscriptionDataV6}
	b = appendString(b, string(s.Delivery))
	b = appendString(b, string(s.Status))
	b = appendString(b, string(s.Signature))
	b = appendString(b, s.PreviousSecret)
	b, err := appendTime(b, s.PreviousSecretExpiresAt)
	if err != nil {
		return nil, err
	}
	b = binary.AppendVarint(b, int64(s.RateLimit))
	b = appendBool(b, s.Retry != nil)
	if r := s.Retry; r != nil {
		b = binary.AppendUvarint(b, uint64(len(r.Schedule)))
		for _, d := range r.Schedule {
			b = binary.AppendVarint(b, int64(d))
		}
		b = binary.AppendVarint(b, int64(r.MaxAttempts))
		b = binary.AppendVarint(b, int64(r.MaxAge))
	}
	b = appendEventsOptions(b, s.Events)
	b = appendString(b, s.Handler)
	if ev := s.Events; ev != nil {
		var expr string
		if ev.Filter != nil {
			expr = ev.Filter.Expression
		}
		b = appendString(b, expr)
		b = binary.AppendUvarint(b, uint64(len(ev.Columns)))
		for _, c := range ev.Columns {
			b = appendString(b, c)
		}
	}
	// Version 6.
	b = appendString(b, s.Tenant)
	var retry RetryPolicy
	if s.Retry != nil {
		retry = *s.Retry
	}
	b = appendString(b, string(retry.ClientErrors))
	b = appendString(b, string(retry.OnExhausted))
	b, err = appendVerificationBlock(b, s)
	if err != nil {
		return nil, err
	}
	return appendBool(b, s.adopted), nil
}

// appendVerificationBlock appends what version 6 added after the retry
// options: Name, UpdatedAt and Verification.
func appendVerificationBlock(b []byte, s *Subscription) ([]byte, error) {
	b = appendString(b, s.Name)
	b, err := appendTime(b, s.UpdatedAt)
	if err != nil {
		return nil, err
	}
	b = appendBool(b, s.Verification != nil)
	if v := s.Verification; v != nil {
		b = binary.AppendVarint(b, int64(v.Attempts))
		for _, t := range []time.Time{v.NextAttemptAt, v.ExpiresAt} {
			if b, err = appendTime(b, t); err != nil {
				return nil, err
			}
		}
		b = appendString(b, v.LastError)
	}
	return b, nil
}

// appendEventsOptions appends whether ev is set and, if it is, its fields.
func appendEventsOptions(b []byte, ev *EventsOptions) []byte {
	b = appendBool(b, ev != nil)
	if ev == nil {
		return b
	}
	for _, v := range []int64{int64(ev.MaxBatchEvents), int64(ev.MaxBatchBytes), int64(ev.MaxWait), int64(ev.Timeout)} {
		b = binary.AppendVarint(b, v)
	}
	// Sorted, so that equal subscriptions encode alike.
	b = binary.AppendUvarint(b, uint64(len(ev.Headers)))
	for _, k := range slices.Sorted(maps.Keys(ev.Headers)) {
		b = appendString(appendString(b, k), ev.Headers[k])
	}
	b = appendBool(b, ev.Filter != nil)
	if f := ev.Filter; f != nil {
		b = appendString(b, f.Field)
		b = binary.AppendUvarint(b, uint64(len(f.Patterns)))
		for _, p := range f.Patterns {
			b = appendString(b, p)
		}
	}
	return b
}

// UnmarshalData sets every field of s that MarshalData encodes from data,
// which any version of this package's MarshalData wrote, or which is empty.
// It leaves the other fields alone, and s unchanged if data is corrupt.
// Only Store implementations call it; applications never need to.
func (s *Subscription) UnmarshalData(data []byte) error {
	// Decoding into a fresh value zeroes what data does not set.
	out := Subscription{ID: s.ID, Pattern: s.Pattern, Webhook: s.Webhook, Description: s.Description,
		Secret: s.Secret, CreatedAt: s.CreatedAt, Health: s.Health}
	if len(data) > 0 {
		d := decoder{b: data}
		version := d.byte()
		if version < subscriptionDataV1 || version > subscriptionDataV6 {
			return errCorruptSubscriptionData
		}
		out.Delivery = DeliveryMode(d.string())
		switch version {
		case subscriptionDataV2:
			out.Status = SubscriptionStatus(d.string())
			if d.byte() == 1 {
				out.Events = d.eventsOptions()
				// Version 2 kept the events' attempt limit in their options.
				out.Retry = &RetryPolicy{MaxAttempts: int(d.varint())}
				d.eventsFilter(out.Events)
			}
		case subscriptionDataV3, subscriptionDataV4, subscriptionDataV5, subscriptionDataV6:
			out.Status = SubscriptionStatus(d.string())
			out.Signature = SignatureScheme(d.string())
			out.PreviousSecret = d.string()
			out.PreviousSecretExpiresAt = d.time()
			out.RateLimit = int(d.varint())
			if d.byte() == 1 {
				out.Retry = d.retryPolicy()
			}
			if d.byte() == 1 {
				out.Events = d.eventsOptions()
				d.eventsFilter(out.Events)
			}
			if version >= subscriptionDataV4 {
				out.Handler = d.string()
			}
			if version >= subscriptionDataV5 && out.Events != nil {
				d.eventsSelection(out.Events)
			}
			if version >= subscriptionDataV6 {
				out.Tenant = d.string()
				d.retryOptions(out.Retry)
				d.verificationBlock(&out)
				out.adopted = d.byte() == 1
			}
		}
		if d.err != nil || len(d.b) != 0 {
			return errCorruptSubscriptionData
		}
	}
	*s = out
	return nil
}

func (d *decoder) retryPolicy() *RetryPolicy {
	r := &RetryPolicy{}
	if n := d.count(); n > 0 {
		r.Schedule = make([]time.Duration, n)
		for i := range r.Schedule {
			r.Schedule[i] = time.Duration(d.varint())
		}
	}
	r.MaxAttempts = int(d.varint())
	r.MaxAge = time.Duration(d.varint())
	return r
}

// retryOptions reads the retry policy's version 6 options into r, which
// must be set if they are.
func (d *decoder) retryOptions(r *RetryPolicy) {
	clientErrors, onExhausted := ClientErrorPolicy(d.string()), ExhaustedAction(d.string())
	if r == nil {
		if clientErrors != "" || onExhausted != "" {
			d.err = errCorruptData
		}
		return
	}
	r.ClientErrors, r.OnExhausted = clientErrors, onExhausted
}

// eventsOptions reads the options' numbers, which every version begins
// with.
func (d *decoder) eventsOptions() *EventsOptions {
	return &EventsOptions{
		MaxBatchEvents: int(d.varint()),
		MaxBatchBytes:  int(d.varint()),
		MaxWait:        time.Duration(d.varint()),
		Timeout:        time.Duration(d.varint()),
	}
}

// eventsFilter reads the options' headers and filter into ev.
func (d *decoder) eventsFilter(ev *EventsOptions) {
	if n := d.count(); n > 0 {
		ev.Headers = make(map[string]string, n)
		for range n {
			k := d.string()
			ev.Headers[k] = d.string()
		}
	}
	if d.byte() == 1 {
		ev.Filter = &EventFilter{Field: d.string()}
		if n := d.count(); n > 0 {
			ev.Filter.Patterns = make([]string, n)
			for i := range ev.Filter.Patterns {
				ev.Filter.Patterns[i] = d.string()
			}
		}
	}
}

// eventsSelection reads the filter's expression and the columns into ev.
func (d *decoder) eventsSelection(ev *EventsOptions) {
	if expr := d.string(); expr != "" {
		if ev.Filter == nil {
			d.err = errCorruptData
			return
		}
		ev.Filter.Expression = expr
	}
	if n := d.count(); n > 0 {
		ev.Columns = make([]string, n)
		for i := range ev.Columns {
			ev.Columns[i] = d.string()
		}
	}
}

// verificationBlock reads what version 6 added into s.
func (d *decoder) verificationBlock(s *Subscription) {
	s.Name = d.string()
	s.UpdatedAt = d.time()
	if d.byte() == 1 {
		s.Verification = &Verification{Attempts: int(d.varint()), NextAttemptAt: d.time(), ExpiresAt: d.time(), LastError: d.string()}
	}
}
