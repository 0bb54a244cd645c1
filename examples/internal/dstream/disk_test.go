package dstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks"
)

// diskServe opens a Server on dir and serves it.
func diskServe(t *testing.T, dir string) *fixture {
	t.Helper()
	s, err := Open(dir, Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return serve(t, s)
}

// diskRestart stops f, as a killed process would stop, and serves a new
// Server loaded from dir.
func diskRestart(t *testing.T, f *fixture, dir string) *fixture {
	t.Helper()
	f.s.Close()
	f.ts.Close()
	return diskServe(t, dir)
}

// diskReads is what clients observe of a stream: HEAD, then a catch-up read
// from each offset. ETags are left out; they change across restarts.
func diskReads(t *testing.T, f *fixture, path string, offsets ...string) []string {
	t.Helper()
	r := f.send(t, http.MethodHead, path, "", "")
	out := []string{fmt.Sprintf("HEAD %d %s %s", r.code, r.header.Get("Content-Type"), r.header.Get("Stream-Next-Offset"))}
	for _, o := range append([]string{"-1"}, offsets...) {
		r := f.send(t, http.MethodGet, path+"?offset="+url.QueryEscape(o), "", "")
		out = append(out, fmt.Sprintf("GET %s: %d %s %s %q", o, r.code, r.header.Get("Content-Type"), r.header.Get("Stream-Next-Offset"), r.body))
	}
	return out
}

// diskFile is the file holding the stream at path.
func diskFile(dir, path string) string { return (&disk{dir: dir}).file(path) }

func diskSize(t *testing.T, name string) int64 {
	t.Helper()
	fi, err := os.Stat(name)
	require.NoError(t, err)
	return fi.Size()
}

func TestDiskReloadPreservesStreams(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	ctx := context.Background()

	offsets := map[string][]string{}
	create := func(path, ct, body string) {
		offsets[path] = append(offsets[path], f.mustCreate(t, path, ct, body))
	}
	appendTo := func(path, ct, body string) {
		offsets[path] = append(offsets[path], f.mustAppend(t, path, ct, body))
	}
	create("/j", "application/json", ` [ {"a": 1}, [2, 3] ] `)
	appendTo("/j", "application/json", `"three"`)
	appendTo("/j", "application/json; charset=utf-8", `[{"b": "x y"}, null, [[4]]]`)
	create("/bin", "application/octet-stream", "\x00\xff\n")
	appendTo("/bin", "", "\x00\x00")
	appendTo("/bin", "", strings.Repeat("z", 70_000))
	create("/text", "text/plain; charset=utf-8", "")
	appendTo("/text", "text/plain", "héllo ")
	appendTo("/text", "text/plain", "wörld")
	create("/empty/json", "application/json", "")
	create("/empty/bytes", "", "")
	create("/sp ace/ünï/a%2Fb", "text/plain", "odd path")

	before := map[string][]string{}
	for path, offs := range offsets {
		before[path] = diskReads(t, f, path, offs...)
	}
	all, err := webhooks.ParsePattern("/**")
	require.NoError(t, err)
	infos, err := f.s.MatchStreams(ctx, all)
	require.NoError(t, err)
	require.Len(t, infos, len(offsets))

	f = diskRestart(t, f, dir)
	for path, offs := range offsets {
		require.Equal(t, before[path], diskReads(t, f, path, offs...), path)
	}
	got, err := f.s.MatchStreams(ctx, all)
	require.NoError(t, err)
	require.Equal(t, infos, got, "the StreamSource sees loaded streams as they were")
	info, err := f.s.Stream(ctx, "/j")
	require.NoError(t, err)
	require.Equal(t, webhooks.StreamInfo{Path: "/j", Tail: offsets["/j"][2]}, info)

	// Appends continue at the old tail and are themselves durable: the file
	// was reopened at the right place.
	require.Equal(t, off(len(`{"a":1}[2,3]"three"{"b":"x y"}null[[4]]{"c":5}`)), f.mustAppend(t, "/j", "", `{"c":5}`))
	f.mustAppend(t, "/empty/bytes", "", "first")
	f = diskRestart(t, f, dir)
	require.Equal(t, `[{"a":1},[2,3],"three",{"b":"x y"},null,[[4]],{"c":5}]`, f.send(t, http.MethodGet, "/j", "", "").body)
	require.Equal(t, `[{"c":5}]`, f.send(t, http.MethodGet, "/j?offset="+offsets["/j"][2], "", "").body)
	require.Equal(t, "first", f.send(t, http.MethodGet, "/empty/bytes", "", "").body)
	events, err := f.s.ReadEvents(ctx, "/j", offsets["/j"][1], webhooks.ReadLimit{})
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte(`{"b":"x y"}`), []byte(`null`), []byte(`[[4]]`), []byte(`{"c":5}`)}, events.Events, "a reloaded stream's messages")
}

func TestDiskAckedOffsetAfterRestart(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	f.mustCreate(t, "/events", "application/json", "")
	f.mustCreate(t, "/log", "text/plain", "")
	var acked, ackedLog string
	for i := 1; i <= 5; i++ {
		tail := f.mustAppend(t, "/events", "application/json", fmt.Sprintf(`{"e":%d}`, i))
		logTail := f.mustAppend(t, "/log", "text/plain", fmt.Sprintf("line %d\n", i))
		if i == 3 {
			acked, ackedLog = tail, logTail
		}
	}

	f.s.Close()
	f.ts.Close()
	s, err := Open(dir, Options{})
	require.NoError(t, err)
	waiting := watchWaiting(s)
	f = serve(t, s)

	r := f.send(t, http.MethodGet, "/events?offset="+acked, "", "")
	require.Equal(t, http.StatusOK, r.code)
	require.Equal(t, `[{"e":4},{"e":5}]`, r.body)
	tail := r.header.Get("Stream-Next-Offset")
	r = f.send(t, http.MethodGet, "/log?offset="+ackedLog, "", "")
	require.Equal(t, "line 4\nline 5\n", r.body)

	// A consumer caught up before the restart long-polls at the old tail and
	// gets exactly the next event.
	got := f.longPoll(t, waiting, "/events?offset="+tail)
	next := f.mustAppend(t, "/events", "application/json", `{"e":6}`)
	res := receive(t, got, "the long-poll reply")
	require.NoError(t, res.err)
	require.Equal(t, `[{"e":6}]`, res.body)
	require.Equal(t, next, res.header.Get("Stream-Next-Offset"))
}

func TestDiskDeletedStreamsStayDeleted(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	f.mustCreate(t, "/a", "application/json", `[1,2]`)
	f.mustAppend(t, "/a", "", `3`)
	f.mustCreate(t, "/b", "text/plain", "keep")
	require.Equal(t, http.StatusNoContent, f.send(t, http.MethodDelete, "/a", "", "").code)
	require.NoFileExists(t, diskFile(dir, "/a"))

	f = diskRestart(t, f, dir)
	require.Equal(t, http.StatusNotFound, f.send(t, http.MethodGet, "/a", "", "").code)
	_, err := f.s.Stream(context.Background(), "/a")
	require.ErrorIs(t, err, webhooks.ErrStreamNotFound)
	require.Equal(t, "keep", f.send(t, http.MethodGet, "/b", "", "").body)

	// The path starts over with a new type, and only the new stream reloads.
	require.Equal(t, off(0), f.mustCreate(t, "/a", "text/plain", ""))
	f.mustAppend(t, "/a", "", "new")
	f = diskRestart(t, f, dir)
	r := f.send(t, http.MethodGet, "/a", "", "")
	require.Equal(t, "text/plain", r.header.Get("Content-Type"))
	require.Equal(t, "new", r.body)
}

func TestDiskTornTail(t *testing.T) {
	// Each case damages a copy of one directory holding a byte stream and a
	// JSON stream of three append records each; bounds are each file's
	// record boundaries.
	golden := t.TempDir()
	bounds := map[string][]int64{}
	f := diskServe(t, golden)
	for _, s := range []struct{ path, ct, a, b string }{
		{"/bytes", "text/plain", "one,", "two,"},
		{"/json", "application/json", `{"n":1}`, `[{"n":2},{"n":3}]`},
	} {
		name := diskFile(golden, s.path)
		f.mustCreate(t, s.path, s.ct, "")
		bounds[s.path] = append(bounds[s.path], diskSize(t, name))
		for _, body := range []string{s.a, s.b, s.b} {
			f.mustAppend(t, s.path, "", body)
			bounds[s.path] = append(bounds[s.path], diskSize(t, name))
		}
	}
	f.s.Close()
	f.ts.Close()
	copyGolden := func(t *testing.T) string {
		t.Helper()
		dir := t.TempDir()
		require.NoError(t, os.CopyFS(dir, os.DirFS(golden)))
		return dir
	}

	// want is each stream's content after n intact appends and, last, after
	// those and an append of "more".
	want := map[string][]string{
		"/bytes": {"", "one,", "one,two,", "one,two,two,"},
		"/json":  {"[]", `[{"n":1}]`, `[{"n":1},{"n":2},{"n":3}]`, `[{"n":1},{"n":2},{"n":3},{"n":2},{"n":3}]`},
	}
	withMore := func(path string, n int) string {
		if path == "/bytes" {
			return want[path][n] + `"more"`
		}
		if n == 0 {
			return `["more"]`
		}
		return strings.TrimSuffix(want[path][n], "]") + `,"more"]`
	}
	// check loads dir and expects intact[path] appends in each stream, its
	// file cut back to them, and a new append right after them.
	check := func(t *testing.T, dir string, intact map[string]int) {
		t.Helper()
		f := diskServe(t, dir)
		for path, n := range intact {
			require.Equal(t, want[path][n], f.send(t, http.MethodGet, path, "", "").body, path)
			require.Equal(t, bounds[path][n], diskSize(t, diskFile(dir, path)), "%s cut back to its intact prefix", path)
			f.mustAppend(t, path, "", `"more"`)
		}
		f = diskRestart(t, f, dir)
		for path, n := range intact {
			require.Equal(t, withMore(path, n), f.send(t, http.MethodGet, path, "", "").body, path)
		}
	}

	for _, path := range []string{"/bytes", "/json"} {
		t.Run(strings.TrimPrefix(path, "/")+" cut anywhere inside the last record", func(t *testing.T) {
			for cut := bounds[path][2] + 1; cut < bounds[path][3]; cut++ {
				dir := copyGolden(t)
				require.NoError(t, os.Truncate(diskFile(dir, path), cut))
				check(t, dir, map[string]int{path: 2})
			}
		})
	}

	flipLast := func(b []byte) []byte {
		b[len(b)-1] ^= 0x01
		return b
	}
	hugeLength := binary.LittleEndian.AppendUint32(nil, 1<<30)
	hugeLength = append(binary.LittleEndian.AppendUint32(hugeLength, 0), "abc"...)
	both := []string{"/bytes", "/json"}
	for _, tc := range []struct {
		name    string
		garbage []byte
		paths   []string
	}{
		{"text", []byte("garbage"), both},
		{"zeros, as a crash can leave", make([]byte, 64), both},
		{"part of a header", []byte{3, 0, 0}, both},
		{"length past the end", hugeLength, both},
		{"checksum mismatch", flipLast(appendRecord(nil, []byte(`"x"`))), both},
		// A byte stream takes any bytes, so this is a JSON-only failure.
		{"valid record, invalid JSON", appendRecord(nil, []byte(`{"n":`)), []string{"/json"}},
	} {
		t.Run("appended "+tc.name, func(t *testing.T) {
			dir := copyGolden(t)
			intact := map[string]int{}
			for _, path := range tc.paths {
				fh, err := os.OpenFile(diskFile(dir, path), os.O_WRONLY|os.O_APPEND, 0)
				require.NoError(t, err)
				_, err = fh.Write(tc.garbage)
				require.NoError(t, err)
				require.NoError(t, fh.Close())
				intact[path] = 3
			}
			check(t, dir, intact)
		})
	}

	t.Run("damaged middle record drops it and all after", func(t *testing.T) {
		dir := copyGolden(t)
		name := diskFile(dir, "/json")
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		b[bounds["/json"][1]+recordHeader] ^= 0x20 // first payload byte of the second append
		require.NoError(t, os.WriteFile(name, b, 0o600))
		check(t, dir, map[string]int{"/json": 1, "/bytes": 3})
	})
}

func TestDiskOpenFailsOnDamagedMetadata(t *testing.T) {
	meta := func(path string) []byte {
		return appendRecord(nil, []byte(`{"v":1,"path":"`+path+`","contentType":"text/plain"}`))
	}
	for name, tc := range map[string]struct {
		file    string
		content []byte
		want    string
	}{
		"torn metadata":    {diskFile("", "/a"), meta("/a")[:10], "no intact metadata"},
		"empty file":       {diskFile("", "/a"), nil, "no intact metadata"},
		"not JSON":         {diskFile("", "/a"), appendRecord(nil, []byte("{")), "metadata"},
		"unknown version":  {diskFile("", "/a"), appendRecord(nil, []byte(`{"v":2,"path":"/a"}`)), "version 2"},
		"misplaced stream": {diskFile("", "/b"), meta("/a"), "belongs in another file"},
		"bad content type": {diskFile("", "/a"), appendRecord(nil, []byte(`{"v":1,"path":"/a","contentType":"/"}`)), "metadata"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, tc.file), tc.content, 0o600))
			_, err := Open(dir, Options{})
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, tc.file)
		})
	}

	t.Run("not a directory", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(name, nil, 0o600))
		_, err := Open(name, Options{})
		require.Error(t, err)
	})
}

func TestDiskOpenCleansUpAndIgnoresStrangers(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	f.mustCreate(t, "/a", "text/plain", "a")
	f.s.Close()
	f.ts.Close()

	// A creation the crash interrupted, and files that are not streams.
	torn := diskFile(dir, "/b") + tmpSuffix
	require.NoError(t, os.WriteFile(torn, []byte("partial"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("hi"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.log"), 0o700))

	f = diskServe(t, dir)
	require.NoFileExists(t, torn)
	require.FileExists(t, filepath.Join(dir, "README"))
	all, err := webhooks.ParsePattern("/**")
	require.NoError(t, err)
	infos, err := f.s.MatchStreams(context.Background(), all)
	require.NoError(t, err)
	require.Equal(t, []webhooks.StreamInfo{{Path: "/a", Tail: off(1)}}, infos)
}

func TestDiskETagsNeverRepeatAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	f.mustCreate(t, "/s", "text/plain", "abc")
	old := f.send(t, http.MethodGet, "/s", "", "").header.Get("ETag")
	f.send(t, http.MethodDelete, "/s", "", "")
	f.mustCreate(t, "/s", "text/plain", "xyz")

	for range 2 {
		f = diskRestart(t, f, dir)
		r := f.send(t, http.MethodGet, "/s", "", "", "If-None-Match", old)
		require.Equal(t, http.StatusOK, r.code, "an ETag from an earlier run names other content")
		require.Equal(t, "xyz", r.body)
		old = r.header.Get("ETag")
	}
	r := f.send(t, http.MethodGet, "/s", "", "", "If-None-Match", old)
	require.Equal(t, http.StatusNotModified, r.code)
}

// diskOnDisk replays the file of the stream at path without changing it and
// returns its tail offset, or "missing".
func diskOnDisk(dir, path string) string {
	b, err := os.ReadFile(diskFile(dir, path))
	if err != nil {
		return "missing"
	}
	metaRec, rest, _ := nextRecord(b)
	var meta fileMeta
	if err := json.Unmarshal(metaRec, &meta); err != nil {
		return "bad metadata: " + err.Error()
	}
	st, err := newStream(meta.ContentType)
	if err != nil {
		return "bad metadata: " + err.Error()
	}
	for {
		payload, next, ok := nextRecord(rest)
		if !ok {
			return formatOffset(st.tail())
		}
		st.replay(payload)
		rest = next
	}
}

// diskObserver records, for each call, what the stream's file holds.
type diskObserver struct {
	dir    string
	mu     sync.Mutex
	events []string
}

func (o *diskObserver) record(kind, path string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, kind+" "+path+" "+diskOnDisk(o.dir, path))
	return nil
}

func (o *diskObserver) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.events
	o.events = nil
	return e
}

func (o *diskObserver) StreamCreated(_ context.Context, path string) error {
	return o.record("created", path)
}

func (o *diskObserver) StreamAppended(_ context.Context, path string) error {
	return o.record("appended", path)
}

func (o *diskObserver) StreamDeleted(_ context.Context, path string) error {
	return o.record("deleted", path)
}

func TestDiskChangesAreDurableBeforeObserverAndReply(t *testing.T) {
	dir := t.TempDir()
	obs := &diskObserver{dir: dir}
	s, err := Open(dir, Options{Observer: obs})
	require.NoError(t, err)
	f := serve(t, s)

	var replies []string
	tail := f.mustCreate(t, "/a", "text/plain", "abc")
	replies = append(replies, diskOnDisk(dir, "/a"))
	require.Equal(t, off(3), tail)
	tail = f.mustAppend(t, "/a", "", "de")
	replies = append(replies, diskOnDisk(dir, "/a"))
	require.Equal(t, off(5), tail)
	require.Equal(t, http.StatusNoContent, f.send(t, http.MethodDelete, "/a", "", "").code)
	replies = append(replies, diskOnDisk(dir, "/a"))

	require.Equal(t, []string{"created /a " + off(3), "appended /a " + off(5), "deleted /a missing"}, obs.take())
	require.Equal(t, []string{off(3), off(5), "missing"}, replies)
}

func TestDiskStorageFailure(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	obs := &diskObserver{dir: dir}
	s, err := Open(dir, Options{Observer: obs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	f := serve(t, s)
	f.mustCreate(t, "/a", "text/plain", "abc")
	require.Len(t, obs.take(), 1)

	// The file vanishes behind the server's back: the append fails, is
	// neither applied nor announced, and the stream reads as before.
	require.NoError(t, os.Remove(diskFile(dir, "/a")))
	r := f.send(t, http.MethodPost, "/a", "text/plain", "de")
	require.Equal(t, http.StatusInternalServerError, r.code)
	require.Equal(t, "abc", f.send(t, http.MethodGet, "/a", "", "").body)
	info, err := s.Stream(context.Background(), "/a")
	require.NoError(t, err)
	require.Equal(t, off(3), info.Tail)
	require.Contains(t, logs.String(), "op=append")

	// A delete still completes: the file is already gone.
	require.Equal(t, http.StatusNoContent, f.send(t, http.MethodDelete, "/a", "", "").code)
	require.Equal(t, []string{"deleted /a missing"}, obs.take())

	// Without its directory, nothing can be created.
	require.NoError(t, os.RemoveAll(dir))
	r = f.send(t, http.MethodPut, "/b", "text/plain", "x")
	require.Equal(t, http.StatusInternalServerError, r.code)
	require.Equal(t, http.StatusNotFound, f.send(t, http.MethodGet, "/b", "", "").code)
	require.Contains(t, logs.String(), "op=create")
	require.Empty(t, obs.take())
}

func TestDiskPathLength(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	longest := "/" + strings.Repeat("é", (maxPathBytes-1)/2) + strings.Repeat("x", (maxPathBytes-1)%2)
	require.Len(t, longest, maxPathBytes)
	f.mustCreate(t, longest, "text/plain", "fits")
	require.Equal(t, http.StatusRequestURITooLong, f.send(t, http.MethodPut, longest+"x", "text/plain", "").code)

	f = diskRestart(t, f, dir)
	require.Equal(t, "fits", f.send(t, http.MethodGet, longest, "", "").body)

	// Memory mode has no such limit.
	m := serve(t, New(Options{}))
	m.mustCreate(t, longest+"x", "text/plain", "")
}

func TestDiskConcurrentAppendsReloadInOrder(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	paths := []string{"/j", "/b"}
	f.mustCreate(t, "/j", "application/json", "")
	f.mustCreate(t, "/b", "application/octet-stream", "")

	const writers, perWriter = 4, 15
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				for _, req := range []struct{ path, body string }{
					{"/j", fmt.Sprintf(`[{"w":%d,"i":%d},%d]`, w, i, i)},
					{"/b", fmt.Sprintf("w%d:%d;", w, i)},
				} {
					r, err := f.roundTrip(context.Background(), http.MethodPost, f.url(req.path), "", req.body)
					if assert.NoError(t, err) {
						assert.Equal(t, http.StatusNoContent, r.code)
					}
				}
			}
		})
	}
	wg.Go(func() { // a reader, so reads overlap the fsyncs
		for range 20 {
			_, err := f.roundTrip(context.Background(), http.MethodGet, f.url("/j"), "", "")
			assert.NoError(t, err)
		}
	})
	wg.Wait()

	before := map[string]string{}
	for _, p := range paths {
		before[p] = f.send(t, http.MethodGet, p, "", "").body
	}
	require.Equal(t, writers*perWriter, strings.Count(before["/b"], ";"))
	f = diskRestart(t, f, dir)
	for _, p := range paths {
		require.Equal(t, before[p], f.send(t, http.MethodGet, p, "", "").body, "%s reloads in the order it was served", p)
	}
}

// BenchmarkAppend measures one JSON append through ServeHTTP.
func BenchmarkAppend(b *testing.B) {
	for _, mode := range []string{"memory", "disk"} {
		b.Run(mode, func(b *testing.B) {
			s := New(Options{})
			if mode == "disk" {
				var err error
				s, err = Open(b.TempDir(), Options{})
				require.NoError(b, err)
			}
			send := func(method, body string) int {
				r := httptest.NewRequest(method, "/bench", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				s.ServeHTTP(w, r)
				return w.Code
			}
			require.Equal(b, http.StatusCreated, send(http.MethodPut, ""))
			b.ReportAllocs()
			for b.Loop() {
				if code := send(http.MethodPost, `{"event":"tick","n":12345}`); code != http.StatusNoContent {
					b.Fatal(code)
				}
			}
		})
	}
}

// diskChildDir, set in the environment, makes TestDiskSurvivesKill the
// child process: it serves a Server on that directory until killed.
const diskChildDir = "DSTREAM_TEST_CHILD_DIR"

// TestDiskSurvivesKill appends over HTTP to a server in a child process,
// SIGKILLs it mid-stream, and reloads: every acknowledged append is there,
// in order, and the one in flight is there whole or not at all.
func TestDiskSurvivesKill(t *testing.T) {
	if dir := os.Getenv(diskChildDir); dir != "" {
		diskChild(dir)
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestDiskSurvivesKill$")
	cmd.Env = append(os.Environ(), diskChildDir+"="+dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the child's address")
	base := "http://" + strings.TrimSpace(line)

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	post := func(method, path, ct, body string) (int, string, error) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Content-Type", ct)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("Stream-Next-Offset"), err
	}
	for path, ct := range map[string]string{"/j": "application/json", "/b": "text/plain"} {
		code, _, err := post(http.MethodPut, path, ct, "")
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code)
	}

	// The appender alternates streams until the kill cuts it off, counting
	// the appends the server acknowledged.
	const killAfter = 100
	var acked struct{ j, b int }
	var lastJ string
	reached := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			code, next, err := post(http.MethodPost, "/j", "application/json", fmt.Sprintf(`{"i":%d}`, i))
			if err != nil || code != http.StatusNoContent {
				return
			}
			acked.j, lastJ = i+1, next
			if code, _, err = post(http.MethodPost, "/b", "text/plain", fmt.Sprintf("%d;", i)); err != nil || code != http.StatusNoContent {
				return
			}
			acked.b = i + 1
			if i+1 == killAfter {
				close(reached)
			}
		}
	}()
	select {
	case <-reached:
	case <-done:
		t.Fatal("the appender stopped before the kill")
	}
	require.NoError(t, cmd.Process.Kill())
	killed = true
	_ = cmd.Wait() // "signal: killed"
	<-done
	require.GreaterOrEqual(t, acked.j, killAfter)

	f := diskServe(t, dir)
	var items []struct{ I int }
	require.NoError(t, json.Unmarshal([]byte(f.send(t, http.MethodGet, "/j", "", "").body), &items))
	require.Contains(t, []int{acked.j, acked.j + 1}, len(items), "acknowledged appends, and perhaps the one in flight")
	for n, it := range items {
		require.Equal(t, n, it.I)
	}
	var want strings.Builder
	for i := range acked.b {
		fmt.Fprintf(&want, "%d;", i)
	}
	got := f.send(t, http.MethodGet, "/b", "", "").body
	if got != want.String() {
		fmt.Fprintf(&want, "%d;", acked.b)
		require.Equal(t, want.String(), got, "acknowledged appends, and perhaps the one in flight")
	}
	after := "[]"
	if len(items) > acked.j {
		after = fmt.Sprintf(`[{"i":%d}]`, acked.j)
	}
	require.Equal(t, after, f.send(t, http.MethodGet, "/j?offset="+lastJ, "", "").body)
}

// diskChild serves a Server on dir at a loopback address it prints, until
// the test kills it.
func diskChild(dir string) {
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(ln.Addr())
	fmt.Fprintln(os.Stderr, http.Serve(ln, s))
	os.Exit(2)
}
