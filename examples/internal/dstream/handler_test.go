package dstream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreate(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))

		r := f.send(t, http.MethodPut, "/agents/task-1", "application/json", "")
		require.Equal(t, http.StatusCreated, r.code)
		require.Equal(t, f.url("/agents/task-1"), r.header.Get("Location"))
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, off(0), r.header.Get("Stream-Next-Offset"))

		// Same configuration, parameters aside: idempotent 200 without Location.
		r = f.send(t, http.MethodPut, "/agents/task-1", "application/json; charset=utf-8", "")
		require.Equal(t, http.StatusOK, r.code)
		require.Empty(t, r.header.Get("Location"))
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, off(0), r.header.Get("Stream-Next-Offset"))

		r = f.send(t, http.MethodPut, "/agents/task-1", "text/plain", "")
		require.Equal(t, http.StatusConflict, r.code)

		// No Content-Type means bytes.
		r = f.send(t, http.MethodPut, "/raw", "", "")
		require.Equal(t, http.StatusCreated, r.code)
		require.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))

		r = f.send(t, http.MethodPut, "/bad-ct", "not a media type", "")
		require.Equal(t, http.StatusBadRequest, r.code)
	})
}

func TestCreateWithInitialBody(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))

		require.Equal(t, off(5), f.mustCreate(t, "/bytes", "text/plain", "hello"))
		r := f.send(t, http.MethodGet, "/bytes?offset=-1", "", "")
		require.Equal(t, "hello", r.body)

		// A re-create does not append its body again.
		r = f.send(t, http.MethodPut, "/bytes", "text/plain", "hello")
		require.Equal(t, http.StatusOK, r.code)
		require.Equal(t, off(5), r.header.Get("Stream-Next-Offset"))

		f.mustCreate(t, "/json", "application/json", ` [ {"a": 1}, [2, 3] ] `)
		r = f.send(t, http.MethodGet, "/json?offset=-1", "", "")
		require.Equal(t, `[{"a":1},[2,3]]`, r.body)

		require.Equal(t, off(0), f.mustCreate(t, "/empty-array", "application/json", "[]"))
		r = f.send(t, http.MethodGet, "/empty-array?offset=-1", "", "")
		require.Equal(t, "[]", r.body)

		r = f.send(t, http.MethodPut, "/invalid", "application/json", "{nope")
		require.Equal(t, http.StatusBadRequest, r.code)
		r = f.send(t, http.MethodHead, "/invalid", "", "")
		require.Equal(t, http.StatusNotFound, r.code, "a rejected PUT must not create the stream")
	})
}

func TestAppendBytes(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/s", "text/plain; charset=utf-8", "")

		require.Equal(t, off(3), f.mustAppend(t, "/s", "text/plain; charset=utf-8", "abc"))
		require.Equal(t, off(5), f.mustAppend(t, "/s", "text/plain", "de"))
		require.Equal(t, off(7), f.mustAppend(t, "/s", "", "[]"), "a missing Content-Type means the stream's own")

		for name, tc := range map[string]struct {
			path, contentType, body string
			header                  []string
			code                    int
		}{
			"empty body":      {"/s", "text/plain", "", nil, http.StatusBadRequest},
			"other type":      {"/s", "application/json", `"x"`, nil, http.StatusConflict},
			"invalid type":    {"/s", "text/", "x", nil, http.StatusBadRequest},
			"missing stream":  {"/nope", "text/plain", "x", nil, http.StatusNotFound},
			"unsupported seq": {"/s", "text/plain", "x", []string{"Stream-Seq", "001"}, http.StatusBadRequest},
		} {
			t.Run(name, func(t *testing.T) {
				r := f.send(t, http.MethodPost, tc.path, tc.contentType, tc.body, tc.header...)
				require.Equal(t, tc.code, r.code, r.body)
			})
		}

		r := f.send(t, http.MethodGet, "/s", "", "")
		require.Equal(t, "abcde[]", r.body, "failed appends must not change the stream")
	})
}

func TestAppendJSON(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/j", "application/json", "")

		f.mustAppend(t, "/j", "application/json", `{"n": 1}`)
		f.mustAppend(t, "/j", "application/json", `[[1, 2], {"n": 2}]`) // flattened one level only
		f.mustAppend(t, "/j", "application/json", ` "s" `)

		for name, body := range map[string]string{
			"empty body":   "",
			"empty array":  "[ ]",
			"invalid JSON": `{"n":`,
			"two values":   `1 2`,
		} {
			t.Run(name, func(t *testing.T) {
				r := f.send(t, http.MethodPost, "/j", "application/json", body)
				require.Equal(t, http.StatusBadRequest, r.code)
			})
		}

		r := f.send(t, http.MethodGet, "/j?offset=-1", "", "")
		require.Equal(t, http.StatusOK, r.code)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, `[{"n":1},[1,2],{"n":2},"s"]`, r.body)
	})
}

func TestBodyLimit(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{MaxBodyBytes: 4}))

		r := f.send(t, http.MethodPut, "/s", "text/plain", "12345")
		require.Equal(t, http.StatusRequestEntityTooLarge, r.code)
		f.mustCreate(t, "/s", "text/plain", "1234")
		r = f.send(t, http.MethodPost, "/s", "text/plain", "12345")
		require.Equal(t, http.StatusRequestEntityTooLarge, r.code)
		f.mustAppend(t, "/s", "text/plain", "5678")
	})
}

func TestCatchUpRead(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/s", "text/plain", "hello ")
		tail := f.mustAppend(t, "/s", "text/plain", "world")

		for query, want := range map[string]string{
			"":                          "hello world", // no offset means the start
			"?offset=-1":                "hello world",
			"?offset=" + off(6):         "world",
			"?offset=" + off(3):         "lo world", // byte streams accept any position
			"?offset=" + tail:           "",
			"?offset=now":               "",
			"?offset=-1&cursor=ignored": "hello world",
		} {
			r := f.send(t, http.MethodGet, "/s"+query, "", "")
			require.Equal(t, http.StatusOK, r.code, query)
			require.Equal(t, want, r.body, query)
			require.Equal(t, "text/plain", r.header.Get("Content-Type"), query)
			require.Equal(t, tail, r.header.Get("Stream-Next-Offset"), query)
			require.Equal(t, "true", r.header.Get("Stream-Up-To-Date"), query)
			require.NotEmpty(t, r.header.Get("ETag"), query)
			require.Empty(t, r.header.Get("Stream-Cursor"), "cursors belong to live reads")
		}

		r := f.send(t, http.MethodGet, "/nope?offset=-1", "", "")
		require.Equal(t, http.StatusNotFound, r.code)
	})
}

func TestCatchUpReadJSON(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/j", "application/json", "")

		r := f.send(t, http.MethodGet, "/j?offset=-1", "", "")
		require.Equal(t, "[]", r.body)
		require.Equal(t, off(0), r.header.Get("Stream-Next-Offset"))

		mid := f.mustAppend(t, "/j", "application/json", `{"n":1}`)
		tail := f.mustAppend(t, "/j", "application/json", `[{"n":2},{"n":3}]`)

		r = f.send(t, http.MethodGet, "/j?offset="+mid, "", "")
		require.Equal(t, `[{"n":2},{"n":3}]`, r.body)
		require.Equal(t, tail, r.header.Get("Stream-Next-Offset"))

		r = f.send(t, http.MethodGet, "/j?offset="+tail, "", "")
		require.Equal(t, "[]", r.body)
	})
}

func TestETag(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/s", "text/plain", "abc")

		first := f.send(t, http.MethodGet, "/s?offset=-1", "", "")
		etag := first.header.Get("ETag")
		r := f.send(t, http.MethodGet, "/s?offset=-1", "", "", "If-None-Match", etag)
		require.Equal(t, http.StatusNotModified, r.code)
		require.Empty(t, r.body)
		require.Equal(t, etag, r.header.Get("ETag"))
		r = f.send(t, http.MethodGet, "/s?offset=-1", "", "", "If-None-Match", `"other", `+etag)
		require.Equal(t, http.StatusNotModified, r.code)

		f.mustAppend(t, "/s", "text/plain", "d")
		r = f.send(t, http.MethodGet, "/s?offset=-1", "", "", "If-None-Match", etag)
		require.Equal(t, http.StatusOK, r.code, "new data must change the ETag")
		require.Equal(t, "abcd", r.body)

		// A re-created stream with the same content must not match the old ETag.
		f.send(t, http.MethodDelete, "/s", "", "")
		f.mustCreate(t, "/s", "text/plain", "abc")
		r = f.send(t, http.MethodGet, "/s?offset=-1", "", "", "If-None-Match", etag)
		require.Equal(t, http.StatusOK, r.code)
	})
}

func TestInvalidOffsets(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/s", "text/plain", "abc")
		f.mustCreate(t, "/j", "application/json", `[{"n":1},{"n":2}]`) // messages at 0 and 7

		for _, tc := range []struct{ path, offset string }{
			{"/s", ""},
			{"/s", "-2"},
			{"/s", "0"},
			{"/s", "abc"},
			{"/s", "0_0"},
			{"/s", "0000000000000000-0000000000000000"},
			{"/s", "000000000000000x_0000000000000000"},
			{"/s", "0000000000000000_000000000000000+"},
			{"/s", "0000000000000001_0000000000000000"}, // a read sequence this server never issues
			{"/s", off(4)}, // past the tail
			{"/j", off(3)}, // inside a JSON message
		} {
			r := f.send(t, http.MethodGet, tc.path+"?offset="+url.QueryEscape(tc.offset), "", "")
			require.Equal(t, http.StatusBadRequest, r.code, "%s at %q", tc.path, tc.offset)
		}

		r := f.send(t, http.MethodGet, "/j?offset="+off(7), "", "")
		require.Equal(t, `[{"n":2}]`, r.body)
	})
}

func TestOffsetsSortAsStrings(t *testing.T) {
	a, b := formatOffset(9), formatOffset(10)
	require.Less(t, a, b)
	require.Len(t, a, 33)
	for _, c := range ",&=?/" {
		require.NotContains(t, a, string(c))
	}
}

func TestHead(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/s", "text/plain", "abc")

		r := f.send(t, http.MethodHead, "/s", "", "")
		require.Equal(t, http.StatusOK, r.code)
		require.Equal(t, "text/plain", r.header.Get("Content-Type"))
		require.Equal(t, off(3), r.header.Get("Stream-Next-Offset"))
		require.Equal(t, "no-store", r.header.Get("Cache-Control"))
		require.Empty(t, r.body)

		r = f.send(t, http.MethodHead, "/nope", "", "")
		require.Equal(t, http.StatusNotFound, r.code)
	})
}

func TestDelete(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/s", "text/plain", "abc")

		r := f.send(t, http.MethodDelete, "/s", "", "")
		require.Equal(t, http.StatusNoContent, r.code)
		r = f.send(t, http.MethodGet, "/s?offset=-1", "", "")
		require.Equal(t, http.StatusNotFound, r.code)
		r = f.send(t, http.MethodDelete, "/s", "", "")
		require.Equal(t, http.StatusNotFound, r.code)

		// The path is free again, and starts over.
		require.Equal(t, off(0), f.mustCreate(t, "/s", "application/json", ""))
	})
}

func TestRejectsUnsupported(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		f := serve(t, open(Options{}))
		f.mustCreate(t, "/s", "text/plain", "")

		r := f.send(t, http.MethodPatch, "/s", "", "")
		require.Equal(t, http.StatusMethodNotAllowed, r.code)
		require.Contains(t, r.header.Get("Allow"), "POST")

		r = f.send(t, http.MethodGet, "/s?offset=-1&live=sse", "", "")
		require.Equal(t, http.StatusBadRequest, r.code)

		r = f.send(t, http.MethodPut, "/ttl", "text/plain", "", "Stream-TTL", "60")
		require.Equal(t, http.StatusBadRequest, r.code)
		require.True(t, strings.Contains(r.body, "Stream-TTL"), r.body)
	})
}

func TestConcurrentAppendsAndReads(t *testing.T) {
	eachMode(t, func(t *testing.T, open func(Options) *Server) {
		s := open(Options{})
		f := serve(t, s)
		f.mustCreate(t, "/j", "application/json", "")

		const writers, perWriter = 4, 25
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range perWriter {
					body := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
					r, err := f.roundTrip(context.Background(), http.MethodPost, f.url("/j"), "application/json", body)
					if assert.NoError(t, err) {
						assert.Equal(t, http.StatusNoContent, r.code)
					}
				}
			})
		}
		stop := make(chan struct{})
		var readers sync.WaitGroup
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := f.roundTrip(context.Background(), http.MethodGet, f.url("/j?offset=-1"), "", "")
				if !assert.NoError(t, err) {
					return
				}
				var items []json.RawMessage
				assert.NoError(t, json.Unmarshal([]byte(r.body), &items), r.body)
				_, err = s.Stream(context.Background(), "/j")
				assert.NoError(t, err)
			}
		})
		wg.Wait()
		close(stop)
		readers.Wait()

		var items []struct{ W, I int }
		require.NoError(t, json.Unmarshal([]byte(f.send(t, http.MethodGet, "/j", "", "").body), &items))
		require.Len(t, items, writers*perWriter)
		next := make([]int, writers)
		for _, it := range items {
			require.Equal(t, next[it.W], it.I, "writer %d's messages out of order", it.W)
			next[it.W]++
		}
	})
}
