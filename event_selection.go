package webhooks

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// selectEvents returns the events of c's batch that sub's filter passes,
// as JSON values with only sub's columns, and their offsets if the batch
// has them. An event whose filter expression
// fails to evaluate is skipped like one it does not match, so that a
// filter never sends what it was meant to keep back; the failures are
// logged, once a batch. Selection that outlives ctx, the attempt's
// timeout, stops with its cause.
func (x *executor) selectEvents(ctx context.Context, c *Consumer, sub *Subscription, batch EventBatch) ([]json.RawMessage, []string, error) {
	filter, err := compileFilter(sub.Events.Filter)
	if err != nil {
		return nil, nil, err
	}
	columns, err := compileColumns(sub.Events.Columns)
	if err != nil {
		return nil, nil, err
	}
	events := make([]json.RawMessage, 0, len(batch.Events))
	var offsets []string
	if len(batch.Offsets) == len(batch.Events) && len(batch.Events) > 0 {
		offsets = make([]string, 0, len(batch.Events))
	}
	failed, firstErr := 0, error(nil)
	for i, ev := range batch.Events {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("filtering the batch of %s: %w", c.PrimaryStream, context.Cause(ctx))
		}
		if !batch.JSON {
			ev, _ = json.Marshal(base64.StdEncoding.EncodeToString(ev))
		}
		ok, err := filter.passes(ctx, ev)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("filtering the batch of %s: %w", c.PrimaryStream, context.Cause(ctx))
			}
			failed++
			firstErr = cmp.Or(firstErr, err)
		}
		if ok {
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
	return events, offsets, nil
}
