package webhooks

import (
	"slices"
	"time"
)

// MaxSkippedBatches bounds the skipped batches a consumer records
// (Consumer.Skipped). A consumer holding that many stops as a dead letter
// rather than skip more, so that no batch is skipped without a record; a
// rewind that delivers skipped batches again frees their places.
const MaxSkippedBatches = 100

// SkippedBatch is the dead-letter record of an event-push batch that its
// consumer skipped once the batch had every attempt its retry policy
// allows (ExhaustedSkip). The events between From and To were not
// acknowledged; rewinding the consumer to From delivers them again. The
// delivery log keeps the attempts under DeliveryID.
type SkippedBatch struct {
	DeliveryID string
	// From is the cursor the batch was read from, To the offset just past
	// it, where the cursor moved on.
	From, To string
	// Attempts is how many attempts the batch had, Failures how many of
	// them, and of the batches before it in the run, failed, since
	// FailingSince; LastError is why the last one failed.
	Attempts     int
	Failures     int
	FailingSince time.Time
	LastError    string
	SkippedAt    time.Time
}

// skipBatch records delivering consumer c's batch as skipped and moves its
// cursor past it, to IDLE with a deadline at now so that the scheduler
// starts what follows. It changes nothing, so that c stops instead, if
// the batch's end is not known or c has no room for another record.
func (m *cursorMachine) skipBatch(c *Consumer, now time.Time) change {
	if c.BatchEnd == "" || len(c.Streams) == 0 || len(c.Skipped) >= MaxSkippedBatches {
		return noChange
	}
	c.Skipped = append(c.Skipped, SkippedBatch{
		DeliveryID: c.WakeID, From: c.Streams[0].Offset, To: c.BatchEnd,
		Attempts: c.Attempt, Failures: c.Failures, FailingSince: c.FailingSince,
		LastError: c.LastError, SkippedAt: now,
	})
	c.Streams[0].Offset = c.BatchEnd
	deliveryOK(c)
	c.State = StateIdle
	c.InFlight = false
	c.Attempt = 0
	c.Batch, c.BatchEnd = ReadLimit{}, ""
	c.Deadline = now
	return changeSave
}

// forgetSkipped drops the records of c's skipped batches that a cursor at
// offset delivers again: those that end past it.
func forgetSkipped(c *Consumer, offset string) {
	c.Skipped = slices.DeleteFunc(c.Skipped, func(s SkippedBatch) bool { return compareOffsets(s.To, offset) > 0 })
	if len(c.Skipped) == 0 {
		c.Skipped = nil
	}
}
