package webhooks

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// selection is what of a batch goes in its payload.
type selection struct {
	events []json.RawMessage
	// offsets are the events', if the source gave them.
	offsets []string
	// eventType is the string at the filter's field that every event
	// has, sent as EventTypeHeader; empty if they differ or have none.
	eventType string
}

// selectEvents returns the events of c's batch that sub's filter passes,
// as JSON values with only sub's columns, their offsets if the batch has
// them, and the type they share. An event whose filter expression
// fails to evaluate is skipped like one it does not match, so that a
// filter never sends what it was meant to keep back; the failures are
// logged, once a batch. Selection that outlives ctx, the attempt's
// timeout, stops with its cause.
func (x *executor) selectEvents(ctx context.Context, c *Consumer, sub *Subscription, batch EventBatch) (selection, error) {
	filter, err := compileFilter(sub.Events.Filter)
	if err != nil {
		return selection{}, err
	}
	columns, err := compileColumns(sub.Events.Columns)
	if err != nil {
		return selection{}, err
	}
	events := make([]json.RawMessage, 0, len(batch.Events))
	var offsets []string
	if len(batch.Offsets) == len(batch.Events) && len(batch.Events) > 0 {
		offsets = make([]string, 0, len(batch.Events))
	}
	failed, firstErr := 0, error(nil)
	types := typeOfAll{}
	for i, ev := range batch.Events {
		if ctx.Err() != nil {
			return selection{}, fmt.Errorf("filtering the batch of %s: %w", c.PrimaryStream, context.Cause(ctx))
		}
		if !batch.JSON {
			ev, _ = json.Marshal(base64.StdEncoding.EncodeToString(ev))
		}
		ok, err := filter.passes(ctx, ev)
		if err != nil {
			if ctx.Err() != nil {
				return selection{}, fmt.Errorf("filtering the batch of %s: %w", c.PrimaryStream, context.Cause(ctx))
			}
			failed++
			firstErr = cmp.Or(firstErr, err)
		}
		if ok {
			types.add(filter.field(ev))
			events = append(events, columns.apply(ev))
			if offsets != nil {
				offsets = append(offsets, batch.Offsets[i])
			}
		}
	}
	if failed > 0 {
		x.log.WarnContext(ctx, "webhooks: the filter expression failed on events, which were skipped",
			"consumer_id", c.ID, "events", failed, "error", firstErr)
	}
	return selection{events: events, offsets: offsets, eventType: types.common()}, nil
}

// typeOfAll finds the one type a batch's events share.
type typeOfAll struct {
	typ   string
	seen  bool
	mixed bool
}

// add counts an event whose type is typ, if ok, and that has none if not.
func (t *typeOfAll) add(typ string, ok bool) {
	switch {
	case !ok:
		t.mixed = true
	case !t.seen:
		t.typ, t.seen = typ, true
	case typ != t.typ:
		t.mixed = true
	}
}

// common is the type every event has, or "".
func (t *typeOfAll) common() string {
	if t.mixed {
		return ""
	}
	return t.typ
}
