package dstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/streamhooks/webhooks"
)

// stream is one append-only log. Fields set on creation never change; the
// rest are guarded by Server.mu, except size.
type stream struct {
	gen         uint64
	contentType string // as given on creation
	mediaType   string // lower-cased, parameters stripped; compared on append
	json        bool
	// size is the length of the stream's file in on-disk mode; guarded by
	// Server.writeMu.
	size int64
	// data holds every byte appended; in JSON mode it is the compacted
	// messages back to back, and starts[i] is where message i begins. An
	// offset's byte part is a position in data.
	data   []byte
	starts []int
	// changed is closed on every append and on delete, waking long-polls
	// without polling; an append replaces it with a fresh channel.
	changed chan struct{}
}

// newStream returns an empty stream of the given content type.
func newStream(contentType string) (*stream, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, err
	}
	return &stream{contentType: contentType, mediaType: mt, json: mt == "application/json", changed: make(chan struct{})}, nil
}

func (st *stream) tail() int { return len(st.data) }

// appendBytes appends to a byte stream.
func (st *stream) appendBytes(b []byte) {
	st.data = append(st.data, b...)
}

// appendMessages appends JSON messages, each already compacted.
func (st *stream) appendMessages(msgs [][]byte) {
	for _, m := range msgs {
		st.starts = append(st.starts, len(st.data))
		st.data = append(st.data, m...)
	}
}

// signal wakes every long-poll waiting on the stream.
func (st *stream) signal() {
	close(st.changed)
	st.changed = make(chan struct{})
}

// body returns what a read from byte position off returns: the raw bytes, or
// in JSON mode a JSON array of the messages.
func (st *stream) body(off int) []byte {
	if !st.json {
		return st.data[off:]
	}
	first := sort.SearchInts(st.starts, off)
	var b bytes.Buffer
	b.WriteByte('[')
	for i := first; i < len(st.starts); i++ {
		if i > first {
			b.WriteByte(',')
		}
		end := st.tail()
		if i+1 < len(st.starts) {
			end = st.starts[i+1]
		}
		b.Write(st.data[st.starts[i]:end])
	}
	b.WriteByte(']')
	return b.Bytes()
}

// resolveOffset turns a client offset into a byte position in st. Beyond the
// reserved -1 and now, only offsets this server could have issued for st are
// accepted: the fixed-width format, a read sequence of 0, a position not past
// the tail and, in JSON mode, on a message boundary.
func (st *stream) resolveOffset(s string) (int, error) {
	switch s {
	case "-1":
		return 0, nil
	case "now":
		return st.tail(), nil
	}
	if !wellFormed(s) {
		return 0, fmt.Errorf("invalid offset %q", s)
	}
	seq, pos, _ := strings.Cut(s, "_")
	n, _ := strconv.Atoi(pos) // 16 digits always fit
	if strings.Trim(seq, "0") != "" || n > st.tail() {
		return 0, fmt.Errorf("offset %q was not issued by this stream", s)
	}
	if st.json && n < st.tail() {
		if i := sort.SearchInts(st.starts, n); i == len(st.starts) || st.starts[i] != n {
			return 0, fmt.Errorf("offset %q is not a message boundary", s)
		}
	}
	return n, nil
}

// wellFormed reports whether s has the form of formatOffset's offsets.
func wellFormed(s string) bool {
	seq, pos, ok := strings.Cut(s, "_")
	return ok && len(seq) == 16 && len(pos) == 16 && allDigits(seq) && allDigits(pos)
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// formatOffset renders a byte position as a fixed-width offset, so offsets
// compare correctly as strings. The read sequence part is always 0.
func formatOffset(pos int) string {
	return fmt.Sprintf("%016d_%016d", 0, pos)
}

// jsonMessages splits a JSON body into compacted messages, flattening a
// top-level array one level.
func jsonMessages(body []byte) ([][]byte, error) {
	if !json.Valid(body) {
		return nil, errors.New("invalid JSON")
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); trimmed[0] != '[' {
		return [][]byte{compactJSON(body)}, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(body, &elems); err != nil {
		return nil, err
	}
	msgs := make([][]byte, len(elems))
	for i, e := range elems {
		msgs[i] = compactJSON(e)
	}
	return msgs, nil
}

// jsonArray joins compacted messages into the JSON array an on-disk record
// holds.
func jsonArray(msgs [][]byte) []byte {
	b := []byte{'['}
	b = append(b, bytes.Join(msgs, []byte{','})...)
	return append(b, ']')
}

// compactJSON strips insignificant whitespace from valid JSON, so stored
// messages join cleanly into the array a read returns.
func compactJSON(v []byte) []byte {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		panic("dstream: compacting valid JSON: " + err.Error())
	}
	return b.Bytes()
}

// Cursor intervals follow the reference server: 20-second steps counted from
// 2024-10-09T00:00:00Z.
var cursorEpoch = time.Date(2024, time.October, 9, 0, 0, 0, 0, time.UTC)

const cursorInterval = 20 * time.Second

// nextCursor returns the Stream-Cursor for a live response. When the client
// echoes a cursor that is not behind the current interval, the cursor moves
// past it, so a CDN never answers a long-poll from a cached response.
func (s *Server) nextCursor(echoed string) string {
	cur := int64(s.clock.Now().Sub(cursorEpoch) / cursorInterval)
	if c, err := strconv.ParseInt(echoed, 10, 64); err == nil && c >= cur {
		cur = c + 1
	}
	return strconv.FormatInt(cur, 10)
}

// Stream implements webhooks.StreamSource.
func (s *Server) Stream(_ context.Context, path string) (webhooks.StreamInfo, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.streams[path]
	if !ok {
		return webhooks.StreamInfo{}, webhooks.ErrStreamNotFound
	}
	return info(path, st), nil
}

// ValidOffset implements webhooks.OffsetValidator: the engine accepts only
// acks of offsets of formatOffset's form with a read sequence of 0, as this
// server issues them.
func (s *Server) ValidOffset(offset string) bool {
	seq, _, _ := strings.Cut(offset, "_")
	return wellFormed(offset) && strings.Trim(seq, "0") == ""
}

// MatchStreams implements webhooks.StreamSource. Results are sorted by path.
func (s *Server) MatchStreams(_ context.Context, pattern *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	s.mu.RLock()
	var out []webhooks.StreamInfo
	for path, st := range s.streams {
		if pattern.Match(path) {
			out = append(out, info(path, st))
		}
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func info(path string, st *stream) webhooks.StreamInfo {
	return webhooks.StreamInfo{Path: path, Tail: formatOffset(st.tail())}
}
