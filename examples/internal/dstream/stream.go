package dstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/streamhooks/webhooks"
)

// stream is one append-only log held in memory. Fields set on creation
// never change; the rest are guarded by memStorage.mu, except size.
type stream struct {
	gen         uint64
	contentType string // as given on creation
	mediaType   string // lower-cased, parameters stripped; compared on append
	json        bool
	// size is the length of the stream's file in on-disk mode; guarded by
	// memStorage.writeMu.
	size int64
	// data holds every byte appended; in JSON mode it is the compacted
	// messages back to back, and starts[i] is where message i begins. An
	// offset's byte part is a position in data. Appends only ever write past
	// the end, so a snapshot may keep reading a prefix without the lock.
	data   []byte
	starts []int
}

// newStream returns an empty stream of the given content type.
func newStream(contentType string) (*stream, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, err
	}
	return &stream{contentType: contentType, mediaType: mt, json: mt == "application/json"}, nil
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

// add appends what prepareAppend returned for a body.
func (st *stream) add(chunks [][]byte) {
	if st.json {
		st.appendMessages(chunks)
		return
	}
	for _, c := range chunks {
		st.appendBytes(c)
	}
}

// chunks returns the stream's contents as prepareAppend would have split
// them: the messages of a JSON stream, or a byte stream's bytes as one chunk.
func (st *stream) chunks() [][]byte {
	if !st.json {
		if len(st.data) == 0 {
			return nil
		}
		return [][]byte{st.data}
	}
	out := make([][]byte, len(st.starts))
	for i, start := range st.starts {
		end := len(st.data)
		if i+1 < len(st.starts) {
			end = st.starts[i+1]
		}
		out[i] = st.data[start:end]
	}
	return out
}

func (st *stream) meta() streamMeta {
	return streamMeta{gen: st.gen, contentType: st.contentType, mediaType: st.mediaType, json: st.json, tail: st.tail()}
}

// snapshot returns the stream as it is now; call it with the lock held.
func (st *stream) snapshot() snapshot {
	return snapshot{streamMeta: st.meta(), data: st.data[:len(st.data):len(st.data)], starts: st.starts[:len(st.starts):len(st.starts)]}
}

// streamMeta is what a stream is, apart from its contents.
type streamMeta struct {
	gen         uint64 // differs between streams ever created at one path
	contentType string
	mediaType   string
	json        bool
	tail        int
}

// prepareAppend checks an append of body with the given media type (empty
// for the stream's own) to a stream and splits it as the stream stores it:
// one chunk of bytes, or the compacted JSON messages.
func prepareAppend(m streamMeta, mediaType string, body []byte) ([][]byte, *httpError) {
	switch {
	case mediaType != "" && mediaType != m.mediaType:
		return nil, &httpError{http.StatusConflict, "stream has Content-Type " + m.contentType}
	case len(body) == 0:
		return nil, &httpError{http.StatusBadRequest, "empty body"}
	case !m.json:
		return [][]byte{body}, nil
	}
	msgs, err := jsonMessages(body)
	if err != nil {
		return nil, &httpError{http.StatusBadRequest, err.Error()}
	}
	if len(msgs) == 0 {
		return nil, &httpError{http.StatusBadRequest, "empty JSON array"}
	}
	return msgs, nil
}

// snapshot is a stream as one read saw it: data holds its bytes from
// position base up to the tail and, in JSON mode, starts holds the
// positions at which its messages begin. A read needs only the part from
// the chunk holding its offset on, so base may be past 0.
type snapshot struct {
	streamMeta
	base   int
	data   []byte
	starts []int
}

// body returns what a read from byte position off returns: the raw bytes, or
// in JSON mode a JSON array of the messages.
func (v *snapshot) body(off int) []byte {
	if !v.json {
		return v.data[off-v.base:]
	}
	first := sort.SearchInts(v.starts, off)
	var b bytes.Buffer
	b.WriteByte('[')
	for i := first; i < len(v.starts); i++ {
		if i > first {
			b.WriteByte(',')
		}
		end := v.tail
		if i+1 < len(v.starts) {
			end = v.starts[i+1]
		}
		b.Write(v.data[v.starts[i]-v.base : end-v.base])
	}
	b.WriteByte(']')
	return b.Bytes()
}

// events returns the events from byte position off, a position the
// snapshot holds (see position), up to byte position until and within
// limit: the messages of a JSON stream, or a byte stream's bytes as one
// event. It reads no further than the snapshot holds, which may stop short
// of the tail (see storage.read).
func (v *snapshot) events(off, until int, limit webhooks.ReadLimit) webhooks.EventBatch {
	b := webhooks.EventBatch{JSON: v.json}
	held := min(v.base+len(v.data), until)
	end := off
	if v.json {
		size := 0
		for i := sort.SearchInts(v.starts, off); i < len(v.starts) && v.starts[i] < held; i++ {
			next := held
			if i+1 < len(v.starts) {
				next = min(v.starts[i+1], held)
			}
			msg := v.data[v.starts[i]-v.base : next-v.base]
			full := limit.MaxEvents > 0 && len(b.Events) == limit.MaxEvents ||
				limit.MaxBytes > 0 && len(b.Events) > 0 && size+len(msg) > limit.MaxBytes
			if full {
				break
			}
			b.Events = append(b.Events, msg)
			size += len(msg)
			end = next
		}
	} else if end = held; end > off {
		if limit.MaxBytes > 0 {
			end = min(end, off+limit.MaxBytes)
		}
		b.Events = [][]byte{v.data[off-v.base : end-v.base]}
	}
	b.Next = formatOffset(end)
	b.UpToDate = end == v.tail
	return b
}

// parseOffset checks a client offset's form: beyond the reserved -1 and now,
// only offsets of formatOffset's form with a read sequence of 0. It returns
// the byte position, or now.
func parseOffset(s string) (pos int, now bool, err error) {
	switch s {
	case "-1":
		return 0, false, nil
	case "now":
		return 0, true, nil
	}
	if !wellFormed(s) {
		return 0, false, fmt.Errorf("invalid offset %q", s)
	}
	seq, p, _ := strings.Cut(s, "_")
	n, _ := strconv.Atoi(p) // 16 digits always fit
	if strings.Trim(seq, "0") != "" {
		return 0, false, fmt.Errorf("offset %q was not issued by this stream", s)
	}
	return n, false, nil
}

// position turns a parsed offset into a byte position in v, accepting only
// positions this server could have issued for it: not past the tail and, in
// JSON mode, on a message boundary.
func (v *snapshot) position(raw string, pos int, now bool) (int, error) {
	if now {
		return v.tail, nil
	}
	if pos > v.tail || pos < v.base {
		return 0, fmt.Errorf("offset %q was not issued by this stream", raw)
	}
	if v.json && pos < v.tail {
		if i := sort.SearchInts(v.starts, pos); i == len(v.starts) || v.starts[i] != pos {
			return 0, fmt.Errorf("offset %q is not a message boundary", raw)
		}
	}
	return pos, nil
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
func (s *Server) Stream(ctx context.Context, path string) (webhooks.StreamInfo, error) {
	m, ok, err := s.store.stat(ctx, path)
	switch {
	case err != nil:
		return webhooks.StreamInfo{}, err
	case !ok:
		return webhooks.StreamInfo{}, webhooks.ErrStreamNotFound
	}
	return streamInfo(path, m.tail), nil
}

// streamInfo describes the stream at path with the given tail. Offsets
// count bytes from 0, so a stream is empty at 0.
func streamInfo(path string, tail int) webhooks.StreamInfo {
	return webhooks.StreamInfo{Path: path, Tail: formatOffset(tail), Empty: tail == 0}
}

// ReadEvents implements webhooks.EventReader. A JSON stream's events are
// its messages; a byte stream's are the bytes from the offset on, as one
// event. A read loads no more chunks than the limit could use: each
// message is a chunk, and each chunk of a byte stream holds a byte at
// least.
func (s *Server) ReadEvents(ctx context.Context, path, from string, limit webhooks.ReadLimit) (webhooks.EventBatch, error) {
	pos, now, err := parseOffset(from)
	if err == nil && now {
		err = errors.New(`offset "now" names no position to read from`)
	}
	until := math.MaxInt
	if err == nil && limit.Until != "" {
		until, err = parseUntil(limit.Until)
	}
	if err != nil {
		return webhooks.EventBatch{}, err
	}
	v, ok, err := s.store.read(ctx, path, pos, chunksFor(limit))
	switch {
	case err != nil:
		return webhooks.EventBatch{}, err
	case !ok:
		return webhooks.EventBatch{}, webhooks.ErrStreamNotFound
	}
	if pos, err = v.position(from, pos, false); err != nil {
		return webhooks.EventBatch{}, err
	}
	return v.events(pos, until, limit), nil
}

// parseUntil is the byte position of ReadLimit.Until, a tail this server
// gave.
func parseUntil(s string) (int, error) {
	pos, now, err := parseOffset(s)
	if err != nil || now || s == "-1" {
		return 0, fmt.Errorf("invalid read limit offset %q", s)
	}
	return pos, nil
}

// chunksFor is how many chunks a read within limit may use, 0 for all:
// one more than its bound, for the chunk that holds the offset read from
// in a byte stream.
func chunksFor(limit webhooks.ReadLimit) int {
	n := 0
	for _, l := range []int{limit.MaxEvents, limit.MaxBytes} {
		if l > 0 && (n == 0 || l < n) {
			n = l
		}
	}
	if n == 0 {
		return 0
	}
	return n + 1
}

// ValidOffset implements webhooks.OffsetValidator: the engine accepts only
// acks of offsets of formatOffset's form with a read sequence of 0, as this
// server issues them.
func (s *Server) ValidOffset(offset string) bool {
	seq, _, _ := strings.Cut(offset, "_")
	return wellFormed(offset) && strings.Trim(seq, "0") == ""
}

// MatchStreams implements webhooks.StreamSource. Results are sorted by path.
func (s *Server) MatchStreams(ctx context.Context, pattern *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	out, err := s.store.match(ctx, pattern)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}
