package soak

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	webhooks "github.com/streamhooks/webhooks"
)

// maxViolationMessages bounds the violations kept verbatim; the rest are
// only counted, so a systematic failure cannot flood memory or output.
const maxViolationMessages = 20

// violations collects broken invariants from any goroutine.
type violations struct {
	mu    sync.Mutex
	msgs  []string
	count int
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.count++
	if len(v.msgs) < maxViolationMessages {
		v.msgs = append(v.msgs, fmt.Sprintf(format, args...))
	}
}

// list returns the kept messages, with a last line for those dropped.
func (v *violations) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := append([]string(nil), v.msgs...)
	if v.count > len(v.msgs) {
		out = append(out, fmt.Sprintf("... and %d more", v.count-len(v.msgs)))
	}
	return out
}

// checkedStore wraps a Store and checks every transition the engine
// commits, under the consumer's lock, where a transient bad state cannot
// escape notice between two samples:
//   - a WAKING or LIVE consumer always has a deadline;
//   - epochs and acked offsets never move backwards;
//   - a consumer becomes a dead letter only by failure GC, only if its
//     endpoint kind fails, and no earlier than FailureGCAfter nor much
//     later; none is deleted.
type checkedStore struct {
	webhooks.Store
	gcAfter time.Duration
	// gcSlack is how late past FailureGCAfter a collection may come.
	gcSlack time.Duration
	v       *violations

	mu  sync.Mutex
	gcs map[kind]int
}

func newCheckedStore(s webhooks.Store, gcAfter, gcSlack time.Duration, v *violations) *checkedStore {
	return &checkedStore{Store: s, gcAfter: gcAfter, gcSlack: gcSlack, v: v, gcs: make(map[kind]int)}
}

// UpdateConsumer implements webhooks.Store, checking what fn commits.
func (s *checkedStore) UpdateConsumer(ctx context.Context, id string, fn func(c *webhooks.Consumer) (webhooks.UpdateAction, error)) (*webhooks.Consumer, error) {
	return s.Store.UpdateConsumer(ctx, id, func(c *webhooks.Consumer) (webhooks.UpdateAction, error) {
		before := c.Clone()
		action, err := fn(c)
		if err != nil {
			return action, err
		}
		switch action {
		case webhooks.UpdateSave:
			s.checkSave(before, c)
			if c.State == webhooks.StateFailed && before.State != webhooks.StateFailed {
				s.checkDeadLetter(c, time.Now())
			}
		case webhooks.UpdateDelete:
			s.v.add("consumer %s deleted", c.ID)
		}
		return action, nil
	})
}

func (s *checkedStore) checkSave(before, after *webhooks.Consumer) {
	if (after.State == webhooks.StateWaking || after.State == webhooks.StateLive) && after.Deadline.IsZero() {
		s.v.add("consumer %s saved %s without a deadline", after.ID, after.State)
	}
	if after.Epoch < before.Epoch {
		s.v.add("consumer %s: epoch went back from %d to %d", after.ID, before.Epoch, after.Epoch)
	}
	for _, b := range before.Streams {
		for _, a := range after.Streams {
			if a.Path == b.Path && compareOffsets(a.Offset, b.Offset) < 0 {
				s.v.add("consumer %s: acked offset of %s went back from %s to %s", after.ID, a.Path, b.Offset, a.Offset)
			}
		}
	}
}

func (s *checkedStore) checkDeadLetter(c *webhooks.Consumer, now time.Time) {
	k, ok := kindOfConsumer(c.ID)
	switch {
	case !ok:
		s.v.add("consumer %s of no soak subscription dead-lettered", c.ID)
		return
	case c.FailingSince.IsZero():
		s.v.add("consumer %s (%s) dead-lettered without a run of failures", c.ID, k)
		return
	case !k.failing():
		s.v.add("consumer %s of a working endpoint (%s) was dead-lettered after failing since %s", c.ID, k, c.FailingSince.Format(time.StampMilli))
	}
	switch ran := now.Sub(c.FailingSince); {
	case ran < s.gcAfter:
		s.v.add("consumer %s dead-lettered after failing for %v, before FailureGCAfter %v", c.ID, ran, s.gcAfter)
	case ran > s.gcAfter+s.gcSlack:
		s.v.add("consumer %s dead-lettered after failing for %v, over %v late", c.ID, ran, s.gcSlack)
	}
	s.mu.Lock()
	s.gcs[k]++
	s.mu.Unlock()
}

// collected returns how many consumers of each kind failure GC made dead
// letters.
func (s *checkedStore) collected() map[kind]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[kind]int, len(s.gcs))
	for k, n := range s.gcs {
		out[k] = n
	}
	return out
}

// ackLedger remembers, for each consumer and stream, the highest offset
// whose ack callback was answered 200. The Store must never hold less.
type ackLedger struct {
	mu    sync.Mutex
	acked map[ackKey]string
	count int
}

type ackKey struct{ consumer, path string }

func newAckLedger() *ackLedger { return &ackLedger{acked: make(map[ackKey]string)} }

func (l *ackLedger) record(consumer, path, offset string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count++
	k := ackKey{consumer, path}
	if have, ok := l.acked[k]; !ok || compareOffsets(offset, have) > 0 {
		l.acked[k] = offset
	}
}

func (l *ackLedger) get(consumer, path string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	off, ok := l.acked[ackKey{consumer, path}]
	return off, ok
}

func (l *ackLedger) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// compareOffsets orders two offsets of one stream as the engine does:
// OffsetNone first, then fixed-width offsets as strings.
func compareOffsets(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == webhooks.OffsetNone:
		return -1
	case b == webhooks.OffsetNone:
		return 1
	default:
		return strings.Compare(a, b)
	}
}
