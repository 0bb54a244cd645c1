package webhooks

import (
	"context"
	"net/http"
	"time"
)

// Secret rotation overlaps: how long the previous secret keeps signing
// beside the new one.
const (
	// DefaultRotationOverlap is the overlap when none is given.
	DefaultRotationOverlap = 24 * time.Hour
	// MaxRotationOverlap bounds it.
	MaxRotationOverlap = 30 * 24 * time.Hour
)

// RotateSecret gives subscription id a new secret, which signs every
// delivery from now on, and returns it. The secret it replaces keeps
// signing beside it, a second signature in the same header, for overlap,
// so that receivers can switch over without downtime; a rotation during
// an overlap ends that one. The API never shows the previous secret. It
// returns ErrSubscriptionNotFound if there is no such subscription, and a
// *ValidationError for an overlap outside 0 to MaxRotationOverlap.
func (e *Engine) RotateSecret(ctx context.Context, id string, overlap time.Duration) (string, error) {
	if err := e.checkLoaded(); err != nil {
		return "", err
	}
	if err := e.inScope(ctx, id); err != nil {
		return "", err
	}
	if overlap < 0 || overlap > MaxRotationOverlap {
		return "", invalid("overlap_ms", "overlap %v is not 0 to %v", overlap, MaxRotationOverlap)
	}
	now := e.clock.Now()
	var secret string
	sub, err := e.store.UpdateSubscription(ctx, id, func(s *Subscription) error {
		secret = newSecret(s.Signature)
		if overlap > 0 {
			s.PreviousSecret, s.PreviousSecretExpiresAt = s.Secret, now.Add(overlap)
		} else {
			s.PreviousSecret, s.PreviousSecretExpiresAt = "", time.Time{}
		}
		s.Secret, s.UpdatedAt = secret, now
		return nil
	})
	if err != nil {
		return "", err
	}
	e.subs.update(sub)
	e.tel.operated(ctx, "rotate")
	return secret, nil
}

// rotateRequest is the body of a rotation; an empty body takes the
// default overlap.
type rotateRequest struct {
	OverlapMS *int64 `json:"overlap_ms"`
}

func (e *Engine) rotateRequest(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	var req rotateRequest
	if err := readOptionalRequest(r.Body, &req); err != nil {
		return 0, nil, err
	}
	overlap := DefaultRotationOverlap
	if req.OverlapMS != nil {
		if *req.OverlapMS < 0 || *req.OverlapMS > MaxRotationOverlap.Milliseconds() {
			return 0, nil, invalid("overlap_ms", "overlap_ms must be 0 to %d", MaxRotationOverlap.Milliseconds())
		}
		overlap = time.Duration(*req.OverlapMS) * time.Millisecond
	}
	secret, err := e.RotateSecret(ctx, sub.ID, overlap)
	if err != nil {
		return 0, nil, err
	}
	now := e.clock.Now()
	return http.StatusOK, map[string]any{
		"subscription_id":         sub.ID,
		"webhook_secret":          secret,
		"previous_secret_expires": now.Add(overlap).UTC(),
	}, nil
}
