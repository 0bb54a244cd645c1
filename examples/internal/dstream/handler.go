package dstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
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

func (e *httpError) write(w http.ResponseWriter) {
	if e.code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, e.msg, e.code)
}

func (e *httpError) Error() string { return e.msg }

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
	if e := s.checkPath(path); e != nil {
		e.write(w)
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

	old, created, err := s.store.create(r.Context(), path, st)
	switch {
	case err != nil:
		s.storageError(r.Context(), "create", path, err).write(w)
		return
	case !created && old.mediaType != st.mediaType:
		http.Error(w, "stream exists with Content-Type "+old.contentType, http.StatusConflict)
		return
	case !created:
		// Idempotent re-create: the body is not appended again.
		w.Header().Set("Content-Type", old.contentType)
		w.Header().Set(hdrNextOffset, formatOffset(old.tail))
		w.WriteHeader(http.StatusOK)
		return
	}

	s.notify(r.Context(), "created", path, Observer.StreamCreated)
	w.Header().Set("Location", location(r))
	w.Header().Set("Content-Type", ct)
	w.Header().Set(hdrNextOffset, formatOffset(tail))
	w.WriteHeader(http.StatusCreated)
}

// storageError logs a change the disk did not take, which therefore did not
// happen, and returns the request's answer. It logs one failure of each
// operation an interval (storageLogInterval), with the count of those it
// did not log.
func (s *Server) storageError(ctx context.Context, op, path string, err error) *httpError {
	if ok, suppressed := s.storageLog.allow(op); ok {
		attrs := []slog.Attr{slog.String("op", op), slog.String("path", path), slog.Any("error", err)}
		if suppressed > 0 {
			attrs = append(attrs, slog.Int("suppressed", suppressed))
		}
		s.log.LogAttrs(ctx, slog.LevelError, "dstream: storage failed", attrs...)
	}
	if s.store.transient(err) {
		return &httpError{http.StatusServiceUnavailable, "storage unavailable; retry later"}
	}
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
	tail, err := s.appendBody(r.Context(), path, mt, body)
	if err != nil {
		s.failed(r.Context(), "append", path, err).write(w)
		return
	}
	w.Header().Set(hdrNextOffset, formatOffset(tail))
	w.WriteHeader(http.StatusNoContent)
}

// failed is the answer to a change the storage refused or failed to make.
func (s *Server) failed(ctx context.Context, op, path string, err error) *httpError {
	var e *httpError
	if errors.As(err, &e) {
		return e
	}
	return s.storageError(ctx, op, path, err)
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
	pos, now, offsetErr := parseOffset(rawOffset)
	from := pos
	if now {
		from = math.MaxInt64 // only the last chunk, for the tail
	}

	var changed <-chan struct{}
	stopWatching := func() {}
	defer func() { stopWatching() }()
	var err error
	if live != "" {
		// Before the read, so that no change after it goes unnoticed.
		if changed, stopWatching, err = s.watch(r.Context(), path); err != nil {
			s.storageError(r.Context(), "watch", path, err).write(w)
			return
		}
	}
	v, ok, err := s.store.read(r.Context(), path, from, 0)
	switch {
	case err != nil:
		s.storageError(r.Context(), "read", path, err).write(w)
		return
	case !ok:
		http.Error(w, "stream not found", http.StatusNotFound)
		return
	case offsetErr != nil:
		http.Error(w, offsetErr.Error(), http.StatusBadRequest)
		return
	}
	off, err := v.position(rawOffset, pos, now)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if live != "" && off == v.tail {
		deadline := s.clock.Timer(s.timeout)
		defer deadline.Stop()
		gen := v.gen
		// A wake-up only says the stream may have changed, so read again
		// until there is data, and answer 404 if this stream is gone.
		for off == v.tail {
			switch s.wait(r.Context(), changed, deadline.C) {
			case clientGone:
				return
			case timedOut:
				w.Header().Set(hdrNextOffset, formatOffset(off))
				w.Header().Set(hdrUpToDate, "true")
				w.Header().Set(hdrCursor, s.nextCursor(q.Get("cursor")))
				w.WriteHeader(http.StatusNoContent)
				return
			}
			stopWatching()
			if changed, stopWatching, err = s.watch(r.Context(), path); err != nil {
				s.storageError(r.Context(), "watch", path, err).write(w)
				return
			}
			v, ok, err = s.store.read(r.Context(), path, off, 0)
			switch {
			case err != nil:
				s.storageError(r.Context(), "read", path, err).write(w)
				return
			case !ok || v.gen != gen:
				http.Error(w, "stream deleted", http.StatusNotFound)
				return
			}
		}
	}
	// A read always runs to the tail, so every 200 is up to date.
	ct, body, tail := v.contentType, v.body(off), v.tail
	etag := fmt.Sprintf(`"%d:%d:%d"`, v.gen, off, tail)

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

// watch returns the channel closed at path's next change, and the function
// to call once the caller stops waiting on it, after it has the storage
// report changes to path through other Servers.
func (s *Server) watch(ctx context.Context, path string) (<-chan struct{}, func(), error) {
	changed, stop := s.waiters.watch(path)
	if err := s.store.watch(ctx, path); err != nil {
		stop()
		return nil, func() {}, err
	}
	return changed, stop, nil
}

type waitResult int

const (
	woken waitResult = iota
	timedOut
	clientGone
)

// wait blocks a long-poll until changed is closed or, with a recheck
// interval, that interval passes (both reported as woken), the deadline
// passes, the server closes (treated as a timeout) or the client goes away.
func (s *Server) wait(ctx context.Context, changed <-chan struct{}, deadline <-chan time.Time) waitResult {
	var recheck <-chan time.Time
	if s.recheck > 0 {
		t := s.clock.Timer(s.recheck)
		defer t.Stop()
		recheck = t.C
	}
	if s.testHookWaiting != nil {
		s.testHookWaiting()
	}
	select {
	case <-changed:
		return woken
	case <-recheck:
		return woken
	case <-deadline:
		return timedOut
	case <-s.closed:
		return timedOut
	case <-ctx.Done():
		return clientGone
	}
}

func (s *Server) head(w http.ResponseWriter, r *http.Request) {
	m, ok, err := s.store.stat(r.Context(), r.URL.Path)
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case err != nil:
		s.storageError(r.Context(), "head", r.URL.Path, err).write(w)
		return
	case !ok:
		http.Error(w, "stream not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", m.contentType)
	w.Header().Set(hdrNextOffset, formatOffset(m.tail))
	w.WriteHeader(http.StatusOK)
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	ok, err := s.delete(r.Context(), path)
	switch {
	case err != nil:
		s.storageError(r.Context(), "delete", path, err).write(w)
		return
	case !ok:
		http.Error(w, "stream not found", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Delete deletes the stream at path, as a DELETE does; a stream already
// gone is not an error.
func (s *Server) Delete(ctx context.Context, path string) error {
	_, err := s.delete(ctx, path)
	return err
}

// delete deletes the stream at path, wakes its long-polls, which then
// answer 404, and tells the Observer; false if there was none.
func (s *Server) delete(ctx context.Context, path string) (bool, error) {
	ok, err := s.store.remove(ctx, path)
	if err != nil || !ok {
		return ok, err
	}
	s.waiters.wake(path)
	s.notify(ctx, "deleted", path, Observer.StreamDeleted)
	return true, nil
}
