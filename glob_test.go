package webhooks

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/glob"
	"github.com/stretchr/testify/require"
)

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		noMatch []string
	}{
		// The spec's examples.
		{"/agents/*", []string{"/agents/task-1"}, []string{"/agents/foo/bar", "/agents", "/agents/", "/other/task-1"}},
		{"/agents/**", []string{"/agents/task-1", "/agents/foo/bar/baz", "/agents"}, []string{"/other/path", "/agentsx", "/"}},
		{"/agents/*/inbox", []string{"/agents/worker-1/inbox"}, []string{"/agents/worker-1/outbox", "/agents//inbox", "/agents/a/b/inbox"}},
		{"/**", []string{"/a", "/a/b/c", "/a/.../b", "/.a/b."}, []string{"", "a", "a/b"}},
		// A path ValidateStreamPath refuses matches nothing, not even `**`.
		{"/**", nil, []string{"/", "//", "/a/", "/a//b", "/a/./b", "/a/../b", "/..", "/a/\xff"}},
		{"/agents/**", nil, []string{"/agents/", "/agents/../admin/x", "/agents/./y", "/agents//z"}},
		// `*` needs a non-empty segment.
		{"/*", []string{"/a"}, []string{"/", "//", "/a/b"}},
		{"/a/*/b", []string{"/a/x/b"}, []string{"/a//b", "/a/b"}},
		// `**` matches zero segments in the middle and at either end.
		{"/a/**/b", []string{"/a/b", "/a/x/b", "/a/x/y/b"}, []string{"/a", "/b", "/a/b/c", "/x/a/b", "/a//b"}},
		{"/**/b", []string{"/b", "/a/b", "/a/x/b"}, []string{"/b/a", "/"}},
		{"/a/**/**/b", []string{"/a/b", "/a/x/b", "/a/x/y/b"}, []string{"/a/x"}},
		{"/**/a/**", []string{"/a", "/x/a", "/a/x", "/x/a/y/z"}, []string{"/x", "/"}},
		{"/**/*", []string{"/a", "/a/b"}, []string{"/", "/a/"}},
		{"/**/a/*/**/b", []string{"/a/x/b", "/q/a/x/y/b", "/a/a/a/b"}, []string{"/a/b", "/a/x", "/a//b"}},
		// Literal segments match exactly, glob meta characters included.
		{"/agents/task-1", []string{"/agents/task-1"}, []string{"/agents/task-10", "/agents/task-1/x", "/Agents/task-1"}},
		{"/a/[bc]", []string{"/a/[bc]"}, []string{"/a/b", "/a/c"}},
		{"/a/b?", []string{"/a/b?"}, []string{"/a/bc"}},
		{"/a/{b,c}", []string{"/a/{b,c}"}, []string{"/a/b", "/a/c"}},
		{`/a/b\c`, []string{`/a/b\c`}, []string{"/a/bc"}},
		{"/a/!b,c-d", []string{"/a/!b,c-d"}, []string{"/a/b"}},
		{"/a%20b/%41", []string{"/a%20b/%41"}, []string{"/a b/A"}},
		// Patterns are decoded paths: "%2A" is literal, not '*'.
		{"/agents/%2A/inbox", []string{"/agents/%2A/inbox"}, []string{"/agents/worker-1/inbox", "/agents/*/inbox"}},
		{"/agents/%2a%2A", []string{"/agents/%2a%2A"}, []string{"/agents/x"}},
		// A run of `**` is one.
		{"/**/**", []string{"/a", "/a/b"}, []string{"", "/"}},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			p, err := ParsePattern(tt.pattern)
			require.NoError(t, err)
			for _, path := range tt.match {
				require.True(t, p.Match(path), "%s should match %q", tt.pattern, path)
			}
			for _, path := range tt.noMatch {
				require.False(t, p.Match(path), "%s should not match %q", tt.pattern, path)
			}
		})
	}
}

func TestParsePatternCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/agents/*", "/agents/*"},
		{"/agents/%2A", "/agents/%2A"},
		{"/agents/%252A", "/agents/%252A"},
		{"/a%20b/%2F", "/a%20b/%2F"},
		{"/**/**", "/**"},
		{"/a/**/**/**/b/**/**", "/a/**/b/**"},
		{"/**/*/**", "/**/*/**"},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, p.String(), tt.in)
	}
}

func TestParsePatternErrors(t *testing.T) {
	tests := []struct{ pattern, msg string }{
		{"", `invalid pattern "": must start with '/'`},
		{"agents/*", `invalid pattern "agents/*": must start with '/'`},
		{"/", `invalid pattern "/": has no segments; "/**" matches every path`},
		{"/agents/", `invalid pattern "/agents/": must not end with '/'`},
		{"/agents//x", `invalid pattern "/agents//x": has an empty segment ("//")`},
		{"//", `invalid pattern "//": has an empty segment ("//")`},
		{"/agents/./x", `invalid pattern "/agents/./x": segment "." is not allowed`},
		{"/agents/..", `invalid pattern "/agents/..": segment ".." is not allowed`},
		{"/agents/foo*", `invalid pattern "/agents/foo*": segment "foo*" mixes '*' with other characters; '*' must be a whole segment`},
		{"/agents/*x", `segment "*x" mixes '*'`},
		{"/a*b", `segment "a*b" mixes '*'`},
		{"/agents/***", `invalid pattern "/agents/***": segment "***": only "*" (one segment) and "**" (any number of segments) are wildcards`},
		{"/a\xffb", `is not valid UTF-8`},
		{"/a/b\x00", `invalid pattern "/a/b\x00": contains the control character U+0000`},
		{"/a\nb/*", `contains the control character U+000A`},
		{"/a/\x7f", `contains the control character U+007F`},
		{"/a/\u0085", `contains the control character U+0085`},
		{"/" + strings.Repeat("a", MaxPatternLength), fmt.Sprintf("invalid pattern: %d bytes long, the limit is %d", MaxPatternLength+1, MaxPatternLength)},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.pattern)
		require.Error(t, err, "%q", tt.pattern)
		require.Nil(t, p)
		require.Contains(t, err.Error(), tt.msg, "%q", tt.pattern)
	}
}

func TestParsePatternMaxLength(t *testing.T) {
	s := "/" + strings.Repeat("a", MaxPatternLength-1)
	p, err := ParsePattern(s)
	require.NoError(t, err)
	require.True(t, p.Match(s))
}

func TestPatternIndex(t *testing.T) {
	x := newPatternIndex()
	add := func(pattern, id string) *Pattern {
		p, err := ParsePattern(pattern)
		require.NoError(t, err)
		x.add(p, id)
		return p
	}
	literal := add("/agents/task-1", "lit")
	star := add("/agents/*", "star")
	add("/agents/**", "deep")
	add("/agents/*/inbox", "inbox")
	add("/**", "all")
	add("/other/path", "other")
	// One id under two patterns is reported once.
	add("/agents/task-1", "twice")
	add("/agents/*", "twice")

	require.Equal(t, []string{"all", "deep", "lit", "star", "twice"}, x.match("/agents/task-1"))
	require.Equal(t, []string{"all", "deep", "inbox"}, x.match("/agents/worker-1/inbox"))
	require.Equal(t, []string{"all", "deep"}, x.match("/agents/worker-1/outbox"))
	require.Equal(t, []string{"all", "deep"}, x.match("/agents"))
	require.Equal(t, []string{"all", "other"}, x.match("/other/path"))
	require.Empty(t, x.match("/"))
	require.Empty(t, x.match("/agents/../agents/task-1"))
	require.Empty(t, x.match("/agents//task-1"))
	require.Empty(t, x.match("/agents/\xff"))
	require.Empty(t, x.match("agents/task-1"))
	require.Empty(t, x.match(""))

	x.remove(literal, "lit")
	x.remove(literal, "absent")
	x.remove(mustParse(t, "/never/added"), "lit")
	require.Equal(t, []string{"all", "deep", "star", "twice"}, x.match("/agents/task-1"))
	x.remove(star, "twice")
	require.Equal(t, []string{"all", "deep", "star", "twice"}, x.match("/agents/task-1"))
	x.remove(literal, "twice")
	require.Equal(t, []string{"all", "deep", "star"}, x.match("/agents/task-1"))
}

func TestPatternIndexRemovePrunes(t *testing.T) {
	x := newPatternIndex()
	patterns := []string{"/a/b/c", "/a/*/c", "/a/**/c", "/a/**", "/**/**/x"}
	for i, s := range patterns {
		x.add(mustParse(t, s), fmt.Sprint(i))
		x.add(mustParse(t, s), fmt.Sprint(i)) // a set: idempotent
	}
	x.remove(mustParse(t, "/a/b"), "0") // a prefix of a pattern: no-op
	require.Equal(t, []string{"0", "1", "2", "3"}, x.match("/a/b/c"))
	for i, s := range patterns {
		x.remove(mustParse(t, s), fmt.Sprint(i))
	}
	require.True(t, x.root.empty(), "removing every pattern leaves an empty root")
	require.Empty(t, x.match("/a/b/c"))
}

// TestPatternPathological checks that many `**` do not make matching
// exponential: the whole-pattern glob takes minutes on these pairs.
func TestPatternPathological(t *testing.T) {
	patterns := []string{
		strings.Repeat("/**", 40) + "/x",
		strings.Repeat("/**/a", 12) + "/*/b",
		strings.Repeat("/**/a/**", 12) + "/c/a/*/b",
	}
	path := strings.Repeat("/a", 300) + "/c/c/b"
	x := newPatternIndex()
	start := time.Now()
	for _, s := range patterns {
		p := mustParse(t, s)
		require.False(t, p.Match(path), s)
		x.add(p, s)
	}
	require.Empty(t, x.match(path))
	require.Equal(t, []string{patterns[0]}, x.match(path+"/x"))
	// Linear work is well under a millisecond; exponential is hours.
	require.Less(t, time.Since(start), 5*time.Second)
}

// TestPatternIndexProperty checks the index, Pattern.Match and a glob of the
// whole pattern against each other on random patterns and paths.
func TestPatternIndexProperty(t *testing.T) {
	patternSegs := []string{"a", "b", "ab", "*", "**", "%2A", "{a,b}", "?"}
	pathSegs := []string{"a", "b", "ab", "", "{a,b}", "?", "*", "%2A"}
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 0))
		x := newPatternIndex()
		patterns := make([]*Pattern, 40)
		refs := make([]*glob.Pattern, len(patterns))
		for i := range patterns {
			segs := make([]string, 1+rng.IntN(5))
			for j := range segs {
				segs[j] = patternSegs[rng.IntN(len(patternSegs))]
			}
			patterns[i] = mustParse(t, "/"+strings.Join(segs, "/"))
			refs[i] = wholeGlob(t, patterns[i])
			x.add(patterns[i], fmt.Sprint(i))
		}
		check := func() {
			for range 200 {
				segs := make([]string, rng.IntN(7))
				for j := range segs {
					segs[j] = pathSegs[rng.IntN(len(pathSegs))]
				}
				path := "/" + strings.Join(segs, "/")
				// A path with an empty segment matches nothing.
				valid := len(segs) > 0 && !slices.Contains(segs, "")
				var want []string
				for i, p := range patterns {
					if p == nil {
						continue
					}
					matched := p.Match(path)
					require.Equal(t, valid && refs[i].Match(path), matched,
						"seed %d: pattern %s, path %q", seed, p, path)
					if matched {
						want = append(want, fmt.Sprint(i))
					}
				}
				require.ElementsMatch(t, want, x.match(path), "seed %d: path %q", seed, path)
			}
		}
		check()
		for i, p := range patterns {
			if rng.IntN(2) == 0 {
				x.remove(p, fmt.Sprint(i))
				patterns[i] = nil
			}
		}
		check()
	}
}

// wholeGlob compiles p into one glob, `**` becoming "{,/**}": a reference
// that is simple but backtracks exponentially; see Pattern.Match.
func wholeGlob(t *testing.T, p *Pattern) *glob.Pattern {
	var b strings.Builder
	for _, seg := range p.segs {
		switch seg {
		case "*":
			b.WriteString("/?*")
		case "**":
			b.WriteString("{,/**}")
		default:
			b.WriteString("/" + glob.QuoteMeta(seg))
		}
	}
	g, err := glob.Compile(b.String(), '/')
	require.NoError(t, err)
	return g
}

func mustParse(tb testing.TB, s string) *Pattern {
	tb.Helper()
	p, err := ParsePattern(s)
	require.NoError(tb, err)
	return p
}

func BenchmarkPatternIndexMatch(b *testing.B) {
	for _, n := range []int{10, 10_000, 100_000} {
		b.Run(fmt.Sprintf("subs=%d", n), func(b *testing.B) {
			x := newPatternIndex()
			for i := range n - 3 {
				x.add(mustParse(b, fmt.Sprintf("/tenants/t%d/streams/s%d", i%1000, i)), fmt.Sprint(i))
			}
			x.add(mustParse(b, "/tenants/*/streams/s5"), "star")
			x.add(mustParse(b, "/tenants/**"), "deep")
			x.add(mustParse(b, "/**/inbox"), "inbox")
			path := "/tenants/t5/streams/s5"
			require.Equal(b, []string{"5", "deep", "star"}, x.match(path))
			b.ReportAllocs()
			for b.Loop() {
				x.match(path)
			}
		})
	}
}

func BenchmarkPatternMatch(b *testing.B) {
	path := "/tenants/t5/streams/s5"
	for _, s := range []string{"/tenants/t5/streams/s5", "/tenants/*/streams/*", "/tenants/**/s5", "/**/t5/**/s5"} {
		b.Run(s, func(b *testing.B) {
			p := mustParse(b, s)
			require.True(b, p.Match(path))
			b.ReportAllocs()
			for b.Loop() {
				p.Match(path)
			}
		})
	}
}
