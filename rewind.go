package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// RewindParams say which cursors Engine.Rewind sets, and to what.
type RewindParams struct {
	SubscriptionID string
	// Consumer, if set, is the one consumer to rewind; otherwise every
	// consumer of the subscription is.
	Consumer string
	// Offset is the new cursor of each consumer's primary stream:
	// OffsetNone to deliver everything again, or an offset of that stream,
	// after which delivery resumes.
	Offset string
	// At, if set instead of Offset, rewinds each consumer to what its
	// primary stream held at that time: every event appended at At or
	// later is delivered again. The StreamSource must be an OffsetFinder.
	At time.Time
}

// errNoOffsetFinder refuses a rewind to a time on a host whose streams
// cannot map one to an offset.
var errNoOffsetFinder = invalid("at", "this server's streams cannot map a time to an offset (OffsetFinder)")

// Rewind sets cursors back, or forward, to p.Offset, so that what follows
// it is delivered again: replay. A consumer's delivery in progress ends,
// its callbacks and late outcomes fenced, and its failures are forgotten; a dead letter keeps its state until it is revived. An
// offset past a stream's tail is refused, for that consumer, with a
// *ValidationError of "offset". It returns how many consumers it rewound.
func (e *Engine) Rewind(ctx context.Context, p *RewindParams) (int, error) {
	if err := e.checkLoaded(); err != nil {
		return 0, err
	}
	finder, _ := e.source.(OffsetFinder)
	switch {
	case p.At.IsZero():
		if err := validateOffset(e.source, p.Offset); err != nil {
			return 0, err
		}
	case p.Offset != "":
		return 0, invalid("offset", "give offset or at, not both")
	case finder == nil:
		return 0, errNoOffsetFinder
	}
	sub, err := e.subscription(ctx, p.SubscriptionID)
	if err != nil {
		return 0, err
	}
	e.tel.operated(ctx, "rewind")
	n := 0
	rewind := func(c *Consumer) error {
		_, err := e.core.update(ctx, c.ID, func(c *Consumer) (change, error) {
			t, err := e.core.readTails(ctx, streamPaths(c))
			if err != nil {
				return noChange, err
			}
			offset := p.Offset
			if !p.At.IsZero() {
				if offset, err = finder.OffsetAt(ctx, c.PrimaryStream, p.At); err != nil {
					return noChange, err
				}
			}
			if info, ok := t[c.PrimaryStream]; ok {
				if err := checkOffset(e.source, "offset", c.PrimaryStream, offset, info.Tail); err != nil {
					return noChange, err
				}
			}
			return e.core.rules.rewind(c, sub, offset, t, e.clock.Now()), nil
		})
		if err == nil {
			n++
		}
		return err
	}
	if p.Consumer != "" {
		c, err := e.store.GetConsumer(ctx, p.Consumer)
		if err != nil {
			return 0, err
		}
		if c.SubscriptionID != sub.ID {
			return 0, detail(ErrConsumerNotFound, "subscription %s has no consumer %q", sub.ID, p.Consumer)
		}
		return n, rewind(c)
	}
	return n, e.eachConsumer(ctx, sub.ID, "", rewind)
}

// rewind sets the cursor of c's primary stream to offset and restarts c
// from it: whatever delivery was in progress ends, and pending work starts
// at once unless c is a dead letter. The new wake or batch fences the
// ended one's callbacks and outcomes with its new epoch; with no pending
// work there is none to fence, since an IDLE consumer takes no outcome
// and no ack below its cursor.
func (m *cursorMachine) rewind(c *Consumer, sub *Subscription, offset string, t tails, now time.Time) change {
	i := streamIndex(c.Streams, c.PrimaryStream)
	if i < 0 {
		return noChange
	}
	c.Streams[i].Offset = offset
	c.Failures, c.FailingSince, c.Attempt, c.Batch, c.BatchEnd = 0, time.Time{}, 0, ReadLimit{}, ""
	forgetSkipped(c, offset)
	if c.State == StateFailed {
		return changeSave
	}
	c.LastError = ""
	return m.finish(c, sub, t, now)
}

// rewindRequest is the body of a rewind: an offset, or a time.
type rewindRequest struct {
	Offset   string    `json:"offset"`
	At       time.Time `json:"at"`
	Consumer string    `json:"consumer"`
}

func (e *Engine) rewindRequest(ctx context.Context, r *http.Request, sub *Subscription) (int, any, error) {
	var req rewindRequest
	if err := readRequest(r.Body, &req); err != nil {
		return 0, nil, err
	}
	if _, ok := e.source.(OffsetFinder); !req.At.IsZero() && !ok {
		return 0, nil, errNoOffsetFinder
	}
	if (req.Offset == "") == req.At.IsZero() {
		return 0, nil, invalid("offset", "give offset or at, not both")
	}
	if req.At.IsZero() {
		if err := validateOffset(e.source, req.Offset); err != nil {
			return 0, nil, err
		}
	}
	if req.Consumer != "" {
		if _, err := e.consumerOf(ctx, sub, req.Consumer); err != nil {
			return 0, nil, err
		}
	}
	n, err := e.Rewind(ctx, &RewindParams{SubscriptionID: sub.ID, Consumer: req.Consumer, Offset: req.Offset, At: req.At})
	if err != nil {
		return 0, nil, fmt.Errorf("rewinding %s: %w", sub.ID, err)
	}
	return http.StatusOK, map[string]any{"rewound": n}, nil
}
