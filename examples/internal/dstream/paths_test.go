package dstream

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks"
)

// acceptedPaths are request targets of each kind of path the server
// accepts, with the stream path each names: the percent-decoded one.
var acceptedPaths = []struct{ target, path string }{
	{"/plain", "/plain"},
	{"/a/b/c", "/a/b/c"},
	{"/caf%C3%A9/%F0%9F%98%80", "/café/😀"},
	{"/ünï/😀", "/ünï/😀"},
	{"/sp%20ace/t+ab", "/sp ace/t+ab"},
	{"/pct%2525", "/pct%25"},
	{"/q%3Fx/h%23y", "/q?x/h#y"},
	{"/star*/{a,b}/[c]/!", "/star*/{a,b}/[c]/!"},
	{"/enc%2Fslash", "/enc/slash"},
	{"/dots/.../x./.y/%2e%2e%2e", "/dots/.../x./.y/..."},
}

// Every kind of path the server accepts reads back byte for byte after a
// restart of the disk storage: contents, offsets, and the path itself as
// the StreamSource reports it.
func TestDiskAcceptedPathsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	ctx := context.Background()
	var want []string
	before, offsets := map[string][]string{}, map[string][]string{}
	for _, p := range acceptedPaths {
		o1 := f.mustCreate(t, p.target, "text/plain", "one ")
		o2 := f.mustAppend(t, p.target, "", "two")
		offsets[p.target] = []string{o1, o2}
		before[p.target] = diskReads(t, f, p.target, o1, o2)
		want = append(want, p.path)
		_, err := f.s.Stream(ctx, p.path)
		require.NoError(t, err, "%q names the stream %q", p.target, p.path)
	}
	slices.Sort(want)
	streams := func() []string {
		all, err := webhooks.ParsePattern("/**")
		require.NoError(t, err)
		infos, err := f.s.MatchStreams(ctx, all)
		require.NoError(t, err)
		var got []string
		for _, info := range infos {
			got = append(got, info.Path)
		}
		slices.Sort(got)
		return got
	}
	require.Equal(t, want, streams())

	f = diskRestart(t, f, dir)
	for _, p := range acceptedPaths {
		require.Equal(t, before[p.target], diskReads(t, f, p.target, offsets[p.target]...), p.target)
		info, err := f.s.Stream(ctx, p.path)
		require.NoError(t, err, "%q after a restart", p.path)
		require.Equal(t, p.path, info.Path)
	}
	require.Equal(t, want, streams())
}

// refusedPaths are request targets that name no stream a pattern could
// name, or that a consumer could not name in a callback (not UTF-8, a
// control character): the server refuses to create them. Paths are
// decoded once, so "%2e%2e" is a ".." segment and "%2F" a '/'.
var refusedPaths = map[string]string{
	"/bad%FF":                 "not valid UTF-8",
	"/bad%C3":                 "not valid UTF-8",
	"/agents/%C0%AF":          "not valid UTF-8",
	"/agents/../admin/x":      `segment ".." is not allowed`,
	"/agents/%2e%2e/admin/x":  `segment ".." is not allowed`,
	"/agents/%2E%2E":          `segment ".." is not allowed`,
	"/agents/./y":             `segment "." is not allowed`,
	"/agents/%2e/y":           `segment "." is not allowed`,
	"/agents//z":              "empty segment",
	"/agents%2F%2Fz":          "empty segment",
	"/agents/":                "must not end with '/'",
	"/agents%2F":              "must not end with '/'",
	"/":                       "has no segments",
	"/agents/..%2Fadmin%2Fx/": `segment ".." is not allowed`,
	"/ctl%01":                 "control character U+0001",
	"/ctl%7F":                 "control character U+007F",
	"/ctl%C2%85":              "control character U+0085",
	"/nul%00":                 "control character U+0000",
}

// The server refuses those paths at the door with 400 and a message that
// says why, in every storage, and a disk restart finds nothing of them.
func TestStreamPathRefused(t *testing.T) {
	check := func(t *testing.T, f *fixture) {
		t.Helper()
		for target, reason := range refusedPaths {
			r := f.send(t, http.MethodPut, target, "text/plain", "x")
			require.Equal(t, http.StatusBadRequest, r.code, "%s: %s", target, r.body)
			require.Contains(t, r.body, reason, target)
			require.Equal(t, http.StatusNotFound, f.send(t, http.MethodGet, target, "", "").code, target)
		}
	}
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{})
		check(t, serve(t, s))
		for _, path := range []string{"/agents/../admin/x", "/agents//z", "/bad\xff"} {
			var ve *httpError
			require.ErrorAs(t, s.Create(context.Background(), path, "text/plain"), &ve, "%q", path)
			require.Equal(t, http.StatusBadRequest, ve.code)
		}
	})
	t.Run("disk", func(t *testing.T) {
		dir := t.TempDir()
		f := diskServe(t, dir)
		check(t, f)
		f.mustCreate(t, "/agents/ok", "text/plain", "x")
		f = diskRestart(t, f, dir)
		check(t, f)
		require.Equal(t, "x", f.send(t, http.MethodGet, "/agents/ok", "", "").body)
	})
}

// A data directory that an older release left holding a stream whose path
// is not valid UTF-8 still opens: that stream is logged and skipped, its
// file kept, and the others are served.
func TestDiskOpenSkipsPathNotUTF8(t *testing.T) {
	dir := t.TempDir()
	f := diskServe(t, dir)
	f.mustCreate(t, "/good", "text/plain", "kept")
	f.s.Close()
	f.ts.Close()

	// What the older release wrote: JSON turned the bad byte into U+FFFD.
	bad := "/agents/\xff"
	meta, err := json.Marshal(fileMeta{Version: formatVersion, Path: bad, ContentType: "text/plain"})
	require.NoError(t, err)
	require.NotContains(t, string(meta), "\xff")
	name := diskFile(dir, bad)
	require.NoError(t, os.WriteFile(name, appendRecord(appendRecord(nil, meta), []byte("lost?")), 0o600))

	var logs bytes.Buffer
	s, err := Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	f = serve(t, s)
	require.Equal(t, "kept", f.send(t, http.MethodGet, "/good", "", "").body)
	require.Equal(t, http.StatusNotFound, f.send(t, http.MethodGet, "/agents/%FF", "", "").code)
	require.Contains(t, logs.String(), "not valid UTF-8")
	require.Contains(t, logs.String(), name)
	require.FileExists(t, name, "the file is left for an operator")
}
