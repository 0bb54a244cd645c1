package dstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Protocol header names.
const (
	hdrNextOffset = "Stream-Next-Offset"
	hdrUpToDate   = "Stream-Up-To-Date"
	hdrCursor     = "Stream-Cursor"
)

// unsupportedHeaders name protocol features this server does not implement;
// requests using them get 400 instead of silently wrong semantics.
var unsupportedHeaders = []string{
	"Stream-TTL", "Stream-Expires-At", "Stream-Closed", "Stream-Seq",
	"Producer-Id", "Producer-Epoch", "Producer-Seq",
}

// ServeHTTP serves the Durable Streams protocol; the URL path names the stream.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch r.Method {
	case http.MethodPut:
		s.create(w, r)
	case http.MethodPost:
		s.append(w, r)
	case http.MethodGet:
		s.read(w, r)
	case http.MethodHead:
		s.head(w, r)
	case http.MethodDelete:
		s.remove(w, r)
	default:
		w.Header().Set("Allow", "PUT, POST, GET, HEAD, DELETE")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// httpError is a failed request's status and message.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) write(w http.ResponseWriter) { http.Error(w, e.msg, e.code) }

func rejectUnsupported(r *http.Request) *httpError {
	for _, h := range unsupportedHeaders {
		if r.Header.Get(h) != "" {
			return &httpError{http.StatusBadRequest, h + " is not supported by this server"}
		}
	}
	return nil
}

// readBody reads the request body, bounded by MaxBodyBytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *httpError) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, &httpError{http.StatusRequestEntityTooLarge, "body too large"}
	case err != nil:
		return nil, &httpError{http.StatusBadRequest, "reading body: " + err.Error()}
	}
	return b, nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	if e := rejectUnsupported(r); e != nil {
		e.write(w)
		return
	}
	path := r.URL.Path
	if s.disk != nil && len(path) > maxPathBytes {
		http.Error(w, "stream path too long for on-disk storage", http.StatusRequestURITooLong)
		return
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/octet-stream"
	}
	st, err := newStream(ct)
	if err != nil {
		http.Error(w, "invalid Content-Type: "+err.Error(), http.StatusBadRequest)
		return
	}
	body, e := s.readBody(w, r)
	if e != nil {
		e.write(w)
		return
	}
	switch {
	case !st.json:
		st.appendBytes(body)
	case len(body) > 0: // an empty JSON stream may be created without a body
		msgs, err := jsonMessages(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		st.appendMessages(msgs)
	}
	tail := st.tail()

	s.writeMu.Lock()
	s.mu.RLock()
	old, ok := s.streams[path]
	var oldTail int
	if ok {
		oldTail = old.tail()
	}
	s.mu.RUnlock()
	if ok {
		s.writeMu.Unlock()
		if old.mediaType != st.mediaType {
			http.Error(w, "stream exists with Content-Type "+old.contentType, http.StatusConflict)
			return
		}
		// Idempotent re-create: the body is not appended again.
		w.Header().Set("Content-Type", old.contentType)
		w.Header().Set(hdrNextOffset, formatOffset(oldTail))
		w.WriteHeader(http.StatusOK)
		return
	}
	if s.disk != nil {
		if err := s.disk.create(path, st); err != nil {
			s.writeMu.Unlock()
			s.storageError(r.Context(), "create", path, err).write(w)
			return
		}
	}
	s.mu.Lock()
	s.gen++
	st.gen = s.gen
	s.streams[path] = st
	s.mu.Unlock()
	s.writeMu.Unlock()

	s.notify(r, "created", path, Observer.StreamCreated)
	w.Header().Set("Location", location(r))
	w.Header().Set("Content-Type", ct)
	w.Header().Set(hdrNextOffset, formatOffset(tail))
	w.WriteHeader(http.StatusCreated)
}

// storageError logs a change the disk did not take, which therefore did not
// happen, and returns the request's answer.
func (s *Server) storageError(ctx context.Context, op, path string, err error) *httpError {
	s.log.LogAttrs(ctx, slog.LevelError, "dstream: storage failed",
		slog.String("op", op), slog.String("path", path), slog.Any("error", err))
	return &httpError{http.StatusInternalServerError, "storage failed"}
}

// location is the absolute URL of the stream a request addressed.
func location(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path}).String()
}

func (s *Server) append(w http.ResponseWriter, r *http.Request) {
	if e := rejectUnsupported(r); e != nil {
		e.write(w)
		return
	}
	// A missing Content-Type means the stream's own.
	var mt string
	if ct := r.Header.Get("Content-Type"); ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			http.Error(w, "invalid Content-Type: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	body, e := s.readBody(w, r)
	if e != nil {
		e.write(w)
		return
	}
	path := r.URL.Path
	tail, e := s.appendLocked(r.Context(), path, mt, body)
	if e != nil {
		e.write(w)
		return
	}
	s.notify(r, "appended", path, Observer.StreamAppended)
	w.Header().Set(hdrNextOffset, formatOffset(tail))
	w.WriteHeader(http.StatusNoContent)
}

// appendLocked appends body to the stream at path and returns the new tail.
func (s *Server) appendLocked(ctx context.Context, path, mediaType string, body []byte) (int, *httpError) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.RLock()
	st, ok := s.streams[path]
	s.mu.RUnlock()
	switch {
	case !ok:
		return 0, &httpError{http.StatusNotFound, "stream not found"}
	case mediaType != "" && mediaType != st.mediaType:
		return 0, &httpError{http.StatusConflict, "stream has Content-Type " + st.contentType}
	case len(body) == 0:
		return 0, &httpError{http.StatusBadRequest, "empty body"}
	}
	var msgs [][]byte
	if st.json {
		var err error
		if msgs, err = jsonMessages(body); err != nil {
			return 0, &httpError{http.StatusBadRequest, err.Error()}
		}
		if len(msgs) == 0 {
			return 0, &httpError{http.StatusBadRequest, "empty JSON array"}
		}
	}
	if s.disk != nil {
		record := body
		if st.json {
			record = jsonArray(msgs)
		}
		if err := s.disk.append(path, st, record); err != nil {
			return 0, s.storageError(ctx, "append", path, err)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if st.json {
		st.appendMessages(msgs)
	} else {
		st.appendBytes(body)
	}
	st.signal()
	return st.tail(), nil
}

func (s *Server) read(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	live := q.Get("live")
	if live != "" && live != "long-poll" {
		http.Error(w, "unsupported live mode "+live, http.StatusBadRequest)
		return
	}
	rawOffset := "-1"
	if q.Has("offset") {
		rawOffset = q.Get("offset")
	}
	path := r.URL.Path

	s.mu.RLock()
	st, ok := s.streams[path]
	if !ok {
		s.mu.RUnlock()
		http.Error(w, "stream not found", http.StatusNotFound)
		return
	}
	off, err := st.resolveOffset(rawOffset)
	if err != nil {
		s.mu.RUnlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if live != "" && off == st.tail() {
		changed := st.changed
		s.mu.RUnlock()
		switch s.wait(r.Context(), changed) {
		case clientGone:
			return
		case timedOut:
			w.Header().Set(hdrNextOffset, formatOffset(off))
			w.Header().Set(hdrUpToDate, "true")
			w.Header().Set(hdrCursor, s.nextCursor(q.Get("cursor")))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		s.mu.RLock()
		if s.streams[path] != st {
			s.mu.RUnlock()
			http.Error(w, "stream deleted", http.StatusNotFound)
			return
		}
	}
	// A read always runs to the tail, so every 200 is up to date.
	ct, body, tail := st.contentType, st.body(off), st.tail()
	etag := fmt.Sprintf(`"%d:%d:%d"`, st.gen, off, tail)
	s.mu.RUnlock()

	h := w.Header()
	h.Set(hdrNextOffset, formatOffset(tail))
	h.Set(hdrUpToDate, "true")
	h.Set("ETag", etag)
	if live != "" {
		h.Set(hdrCursor, s.nextCursor(q.Get("cursor")))
	}
	if etagListed(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", ct)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body) // a write error means the client left
}

// etagListed reports whether an If-None-Match value names etag.
func etagListed(ifNoneMatch, etag string) bool {
	for _, v := range strings.Split(ifNoneMatch, ",") {
		if strings.TrimSpace(v) == etag {
			return true
		}
	}
	return false
}

type waitResult int

const (
	woken waitResult = iota
	timedOut
	clientGone
)

// wait blocks a long-poll until changed is closed, the timeout passes, the
// server closes (treated as a timeout) or the client goes away.
func (s *Server) wait(ctx context.Context, changed <-chan struct{}) waitResult {
	t := s.clock.Timer(s.timeout)
	defer t.Stop()
	if s.testHookWaiting != nil {
		s.testHookWaiting()
	}
	select {
	case <-changed:
		return woken
	case <-t.C:
		return timedOut
	case <-s.closed:
		return timedOut
	case <-ctx.Done():
		return clientGone
	}
}

func (s *Server) head(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	st, ok := s.streams[r.URL.Path]
	var ct string
	var tail int
	if ok {
		ct, tail = st.contentType, st.tail()
	}
	s.mu.RUnlock()
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		http.Error(w, "stream not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set(hdrNextOffset, formatOffset(tail))
	w.WriteHeader(http.StatusOK)
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	s.writeMu.Lock()
	s.mu.RLock()
	st, ok := s.streams[path]
	s.mu.RUnlock()
	if !ok {
		s.writeMu.Unlock()
		http.Error(w, "stream not found", http.StatusNotFound)
		return
	}
	if s.disk != nil {
		if err := s.disk.remove(path); err != nil {
			s.writeMu.Unlock()
			s.storageError(r.Context(), "delete", path, err).write(w)
			return
		}
	}
	s.mu.Lock()
	delete(s.streams, path)
	close(st.changed) // wakes long-polls, which then answer 404
	s.mu.Unlock()
	s.writeMu.Unlock()

	s.notify(r, "deleted", path, Observer.StreamDeleted)
	w.WriteHeader(http.StatusNoContent)
}
