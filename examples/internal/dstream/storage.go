package dstream

import (
	"context"
	"net/http"
	"sync"

	"github.com/streamhooks/webhooks"
)

// storage keeps a Server's streams: in memory, optionally written through
// to disk (memStorage), or in PostgreSQL (pgStorage), where several Servers
// share them. The protocol is served on top of it, alike for every kind.
//
// Failures other than *httpError are the storage's own: the change did not
// happen, and the client gets a generic 500.
type storage interface {
	// checkPath rejects a path the storage cannot hold.
	checkPath(path string) *httpError
	// create stores st, a new stream with its initial contents, at path,
	// unless a stream is there already; then it returns that stream's meta
	// and created is false.
	create(ctx context.Context, path string, st *stream) (existing streamMeta, created bool, err error)
	// append checks body with prepareAppend and appends it, returning the
	// new tail.
	append(ctx context.Context, path, mediaType string, body []byte) (tail int, err error)
	// read returns the stream's snapshot, holding at least the part from
	// the chunk that holds position from to the tail, or, if chunks is
	// positive, at least that many chunks of that part (all of them if
	// fewer).
	read(ctx context.Context, path string, from, chunks int) (v snapshot, ok bool, err error)
	stat(ctx context.Context, path string) (m streamMeta, ok bool, err error)
	// watch says that a long-poll will wait on path, before it reads the
	// stream, so that the storage reports a change through another Server
	// after that read to this one's waiters.
	watch(ctx context.Context, path string) error
	// match returns the streams whose paths pattern matches, in any order.
	match(ctx context.Context, pattern *webhooks.Pattern) ([]webhooks.StreamInfo, error)
	remove(ctx context.Context, path string) (ok bool, err error)
	// close stops background work; the storage keeps serving calls.
	close()
	// transient reports whether err, a failure of the storage, may pass:
	// the storage could not be reached, and a retry may succeed.
	transient(err error) bool
}

// errNotFound is the answer to a change of a stream that does not exist.
var errNotFound = &httpError{http.StatusNotFound, "stream not found"}

// memStorage holds streams in memory and, with a disk, in files.
type memStorage struct {
	// writeMu serializes changes, so each reaches the disk and memory in
	// the same order, while reads, which take only mu, never wait for an
	// fsync. Lock order: writeMu, then mu.
	writeMu sync.Mutex
	disk    *disk // nil in memory mode

	mu      sync.RWMutex
	streams map[string]*stream
	gen     uint64 // counts creations so a re-created stream never reuses ETags
}

func (m *memStorage) checkPath(path string) *httpError {
	if m.disk != nil && len(path) > maxPathBytes {
		return &httpError{http.StatusRequestURITooLong, "stream path too long for on-disk storage"}
	}
	return nil
}

func (m *memStorage) create(_ context.Context, path string, st *stream) (streamMeta, bool, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	if _, existing, ok := m.lookup(path); ok {
		return existing, false, nil
	}
	if m.disk != nil {
		if err := m.disk.create(path, st); err != nil {
			return streamMeta{}, false, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	st.gen = m.gen
	m.streams[path] = st
	return streamMeta{}, true, nil
}

func (m *memStorage) append(_ context.Context, path, mediaType string, body []byte) (int, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	st, meta, ok := m.lookup(path)
	if !ok {
		return 0, errNotFound
	}
	chunks, e := prepareAppend(meta, mediaType, body)
	if e != nil {
		return 0, e
	}
	if m.disk != nil {
		record := body
		if st.json {
			record = jsonArray(chunks)
		}
		if err := m.disk.append(path, st, record); err != nil {
			return 0, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st.add(chunks)
	return st.tail(), nil
}

func (m *memStorage) read(_ context.Context, path string, _, _ int) (snapshot, bool, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st, ok := m.streams[path]
	if !ok {
		return snapshot{}, false, nil
	}
	return st.snapshot(), true, nil
}

func (m *memStorage) stat(_ context.Context, path string) (streamMeta, bool, error) {
	_, meta, ok := m.lookup(path)
	return meta, ok, nil
}

// lookup returns the stream at path and its meta, read under mu.
func (m *memStorage) lookup(path string) (*stream, streamMeta, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st, ok := m.streams[path]
	if !ok {
		return nil, streamMeta{}, false
	}
	return st, st.meta(), true
}

func (m *memStorage) match(_ context.Context, pattern *webhooks.Pattern) ([]webhooks.StreamInfo, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var out []webhooks.StreamInfo
	for path, st := range m.streams {
		if pattern.Match(path) {
			out = append(out, streamInfo(path, st.tail()))
		}
	}
	return out, nil
}

func (m *memStorage) remove(_ context.Context, path string) (bool, error) {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.mu.RLock()
	_, ok := m.streams[path]
	m.mu.RUnlock()
	if !ok {
		return false, nil
	}
	if m.disk != nil {
		if err := m.disk.remove(path); err != nil {
			return false, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.streams, path)
	return true, nil
}

func (m *memStorage) close() {}

// watch has nothing to do: every change is made through this Server.
func (m *memStorage) watch(context.Context, string) error { return nil }

// waiters wakes the long-polls waiting for a change to a stream. A
// long-poll takes the channel for its path before it reads the stream, so
// a change made after that read always wakes it.
type waiters struct {
	mu     sync.Mutex
	byPath map[string]*waiter
}

// transient is false: a disk that failed once is no better a moment later.
func (m *memStorage) transient(error) bool { return false }

// waiter is the channel closed at the next change of one path, with the
// number of long-polls holding it.
type waiter struct {
	ch    chan struct{}
	count int
}

// watch returns a channel closed at the next change of path, and a function
// to call once the caller stops waiting on it.
func (w *waiters) watch(path string) (<-chan struct{}, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byPath == nil {
		w.byPath = make(map[string]*waiter)
	}
	wt := w.byPath[path]
	if wt == nil {
		wt = &waiter{ch: make(chan struct{})}
		w.byPath[path] = wt
	}
	wt.count++
	return wt.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		wt.count--
		if wt.count == 0 && w.byPath[path] == wt {
			delete(w.byPath, path)
		}
	}
}

// wake wakes the long-polls waiting for path.
func (w *waiters) wake(path string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.byPath[path]; wt != nil {
		close(wt.ch)
		delete(w.byPath, path)
	}
}

// wakeAll wakes every long-poll, after changes may have gone unnoticed.
func (w *waiters) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for path, wt := range w.byPath {
		close(wt.ch)
		delete(w.byPath, path)
	}
}
