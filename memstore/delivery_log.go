package memstore

import (
	"context"
	"encoding/binary"

	webhooks "github.com/streamhooks/webhooks"
)

// attemptLog is a consumer's delivery log: its attempts, oldest first, each
// as DeliveryAttempt.MarshalData encodes it, after its length as a uvarint.
// One byte slice of the exact size costs a consumer woken once about 90
// bytes, where a slice of DeliveryAttempt in a map by consumer took about
// 200 (the map's slot, the struct and the response preview).
type attemptLog struct{ b []byte }

// records splits the log into its attempts' encodings, oldest first.
func (l *attemptLog) records() [][]byte {
	var out [][]byte
	for b := l.b; len(b) > 0; {
		n, w := binary.Uvarint(b)
		out = append(out, b[w:w+int(n)])
		b = b[w+int(n):]
	}
	return out
}

// newAttemptLog encodes records, or returns an empty log for none.
func newAttemptLog(records [][]byte) attemptLog {
	size := 0
	for _, r := range records {
		size += binary.MaxVarintLen64 + len(r)
	}
	if size == 0 {
		return attemptLog{}
	}
	b := make([]byte, 0, size)
	for _, r := range records {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	// The exact size: a log lives as long as its consumer.
	return attemptLog{b: append([]byte(nil), b...)}
}

// AppendAttempts implements webhooks.DeliveryLog.
func (s *Store) AppendAttempts(_ context.Context, attempts []*webhooks.DeliveryAttempt, keep int) error {
	var consumers []*webhooks.DeliveryAttempt
	ds := make(map[*dsSub][][]byte)
	s.ds.mu.Lock()
	for _, a := range attempts {
		id, ok := webhooks.DSDeliveryLogSubscription(a.ConsumerID)
		if !ok {
			consumers = append(consumers, a)
			continue
		}
		d, err := s.dsLive(id)
		if err != nil {
			continue
		}
		data, err := a.MarshalData()
		if err != nil {
			s.ds.mu.Unlock()
			return err
		}
		ds[d] = append(ds[d], data)
	}
	for d, records := range ds {
		d.attempts = appendRecords(d.attempts, records, keep)
	}
	s.ds.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	added := make(map[*entry][][]byte)
	for _, a := range consumers {
		e := s.consumers[a.ConsumerID]
		if e == nil {
			continue
		}
		data, err := a.MarshalData()
		if err != nil {
			return err
		}
		added[e] = append(added[e], data)
	}
	for e, records := range added {
		e.attempts = appendRecords(e.attempts, records, keep)
	}
	return nil
}

// appendRecords returns log with records appended, trimmed to the newest
// keep.
func appendRecords(log attemptLog, records [][]byte, keep int) attemptLog {
	records = append(log.records(), records...)
	return newAttemptLog(records[max(len(records)-max(keep, 0), 0):])
}

// ListAttempts implements webhooks.DeliveryLog.
func (s *Store) ListAttempts(_ context.Context, consumerID string, limit int) ([]*webhooks.DeliveryAttempt, error) {
	var log attemptLog
	if id, ok := webhooks.DSDeliveryLogSubscription(consumerID); ok {
		s.ds.mu.Lock()
		if d, err := s.dsLive(id); err == nil {
			log = d.attempts
		}
		s.ds.mu.Unlock()
	} else {
		s.mu.RLock()
		if e := s.consumers[consumerID]; e != nil {
			log = e.attempts
		}
		s.mu.RUnlock()
	}
	if len(log.b) == 0 || limit < 1 {
		return []*webhooks.DeliveryAttempt{}, nil
	}
	records := log.records()
	out := make([]*webhooks.DeliveryAttempt, 0, min(limit, len(records)))
	for i := len(records) - 1; i >= 0 && len(out) < limit; i-- {
		a := &webhooks.DeliveryAttempt{ConsumerID: consumerID}
		if err := a.UnmarshalData(records[i]); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
