package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/stretchr/testify/require"

	webhooks "github.com/streamhooks/webhooks"
	"github.com/streamhooks/webhooks/receiver"
)

// appendEvents appends JSON events to the stream at path, creating it, and
// returns its tail. The caller tells the engine.
func (s *fakeSource) appendEvents(path string, events ...string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		s.events[path] = append(s.events[path], []byte(e))
	}
	s.streams[path] = len(s.events[path])
	return offset(s.streams[path])
}

// appendBytes appends to the byte stream at path, creating it, and
// returns its tail.
func (s *fakeSource) appendBytes(path string, b []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bytes[path] = append(s.bytes[path], b...)
	s.streams[path] = len(s.bytes[path])
	return offset(s.streams[path])
}

// position parses an offset this source gave, or "-1".
func position(o string) (int, error) {
	if o == webhooks.OffsetNone {
		return 0, nil
	}
	var seq, n int
	if _, err := fmt.Sscanf(o, "%016d_%016d", &seq, &n); err != nil || offset(n) != o {
		return 0, fmt.Errorf("bad offset %q", o)
	}
	return n, nil
}

func (s *fakeSource) ReadEvents(_ context.Context, path, from string, limit webhooks.ReadLimit) (webhooks.EventBatch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	n, ok := s.streams[path]
	if !ok {
		return webhooks.EventBatch{}, webhooks.ErrStreamNotFound
	}
	pos, err := position(from)
	if err != nil || pos > n {
		return webhooks.EventBatch{}, fmt.Errorf("cannot read %s from %q", path, from)
	}
	until := n
	if limit.Until != "" {
		if until, err = position(limit.Until); err != nil {
			return webhooks.EventBatch{}, err
		}
		until = min(until, n)
	}
	events, isJSON := s.events[path]
	if !isJSON {
		// A byte stream: the bytes appended, or a counter's n bytes of 'x'.
		b, ok := s.bytes[path]
		if !ok {
			b = bytes.Repeat([]byte("x"), n)
		}
		end := until
		if limit.MaxBytes > 0 {
			end = min(end, pos+limit.MaxBytes)
		}
		out := webhooks.EventBatch{Next: offset(max(end, pos)), UpToDate: max(end, pos) == n}
		if end > pos {
			out.Events = [][]byte{b[pos:end]}
		}
		return out, nil
	}
	out := webhooks.EventBatch{JSON: true}
	size, end := 0, pos
	for i := pos; i < until; i++ {
		ev := events[i]
		if limit.MaxEvents > 0 && len(out.Events) == limit.MaxEvents ||
			limit.MaxBytes > 0 && len(out.Events) > 0 && size+len(ev) > limit.MaxBytes {
			break
		}
		out.Events = append(out.Events, ev)
		if s.eventOffsets {
			out.Offsets = append(out.Offsets, offset(i+1))
		}
		size += len(ev)
		end = i + 1
	}
	out.Next, out.UpToDate = offset(end), end == n
	return out, nil
}

// subscribeEvents creates events subscription id on pattern to the
// receiver, with the options in fields (JSON object members, or ""), and
// returns its secret.
func (h *harness) subscribeEvents(id, pattern, fields string) string {
	h.t.Helper()
	body := fmt.Sprintf(`{"webhook":%q,"delivery":"events"`, h.recv.url())
	if fields != "" {
		body += "," + fields
	}
	rec := h.do(http.MethodPut, pattern+"?subscription="+id, body+"}")
	require.Equal(h.t, http.StatusCreated, rec.Code, rec.Body.String())
	var out struct {
		Secret string `json:"webhook_secret"`
	}
	require.NoError(h.t, json.Unmarshal(rec.Body.Bytes(), &out))
	return out.Secret
}

// push appends JSON events to the stream at path, tells the engine, and
// returns the tail.
func (h *harness) push(path string, events ...string) string {
	h.t.Helper()
	_, existed := h.source.Stream(context.Background(), path)
	tail := h.source.appendEvents(path, events...)
	if existed != nil {
		require.NoError(h.t, h.engine.StreamCreated(context.Background(), path))
	} else {
		require.NoError(h.t, h.engine.StreamAppended(context.Background(), path))
	}
	return tail
}

// nextBatch waits for the receiver's next POST and decodes it as a batch.
func (h *harness) nextBatch() (delivery, receiver.EventsPayload) {
	h.t.Helper()
	d := h.nextDelivery()
	var p receiver.EventsPayload
	require.NoError(h.t, json.Unmarshal(d.body, &p), string(d.body))
	return d, p
}

// eventStrings returns a batch's events as strings.
func eventStrings(p receiver.EventsPayload) []string {
	out := make([]string, len(p.Events))
	for i, e := range p.Events {
		out[i] = string(e)
	}
	return out
}

// numbered returns the JSON events {"n":from} to {"n":to}.
func numbered(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, `{"n":`+strconv.Itoa(i)+`}`)
	}
	return out
}

// waitCursor waits until consumer id's cursor is at offset.
func (h *harness) waitCursor(id, at string) *webhooks.Consumer {
	h.t.Helper()
	return h.waitConsumer(id, func(c *webhooks.Consumer) bool { return c.Streams[0].Offset == at })
}
