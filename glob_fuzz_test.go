package webhooks

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// globFuzzMaxPath bounds the fuzzed paths: stream paths are at most
// MaxStreamPathLength long, and a few times that still shows a blow-up.
const globFuzzMaxPath = 4 * MaxStreamPathLength

// globFuzzBudget is how long one parse and match may take on inputs within
// the limits. Linear work takes well under a millisecond; a backtracking
// matcher takes minutes on the pathological seeds.
const globFuzzBudget = 2 * time.Second

// FuzzPattern checks ParsePattern and Match on arbitrary input: parsing
// never panics, a valid pattern's canonical form parses back to the same
// pattern, and Match, the pattern index and a simple segment matcher agree
// on every path, in bounded time.
func FuzzPattern(f *testing.F) {
	for _, seed := range []struct{ pattern, path string }{
		{"/agents/*", "/agents/task-1"},
		{"/agents/**", "/agents/foo/bar/baz"},
		{"/agents/*/inbox", "/agents/worker-1/inbox"},
		{"/**", "/"},
		{"/**", "//"},
		{"/*", "/"},
		{"/a/**/b", "/a//b"},
		{"/**/*", "/a/"},
		{"/agents/%2A", "/agents/x"},
		{"/agents/%2a%2A", "/agents/%2a%2A"},
		{"/a/%252A", "/a/%252A"},
		{"/a/**/**/b", "/a/x/b"},
		{"/**/**", "/"},
		{"/a\x00b", "/a\x00b"},
		{"/a\x7f/*", "/a\x7f/x"},
		{"/a\u0085", "/a\u0085"},
		{"/a\u00a0", "/a\u00a0"},
		{"/a/[bc]", "/a/b"},
		{"/a/{b,c}", "/a/{b,c}"},
		{`/a/b\c`, `/a/b\c`},
		{"/a%20b/%41", "/a b/A"},
		{"/é/*", "/é/ü"},
		{"/a\xffb", "/a\xffb"},
		{"/agents/", "/agents/"},
		{"//", "//"},
		{"/a/./b", "/a/./b"},
		{"/foo*", "/foo"},
		{"/***", "/a"},
		{"/", "/"},
		{"", ""},
		{"/" + strings.Repeat("a", MaxPatternLength-1), "/" + strings.Repeat("a", MaxPatternLength-1)},
		{"/" + strings.Repeat("a", MaxPatternLength), "/a"},
		{strings.Repeat("/**", 40) + "/x", strings.Repeat("/a", 300) + "/c"},
		{strings.Repeat("/**/a", 12) + "/*/b", strings.Repeat("/a", 300) + "/c/c/b"},
		{strings.Repeat("/**/a/**", 12) + "/c/a/*/b", strings.Repeat("/a", 300) + "/c/c/b"},
	} {
		f.Add(seed.pattern, seed.path)
	}
	f.Fuzz(func(t *testing.T, pattern, path string) {
		if len(path) > globFuzzMaxPath {
			path = path[:globFuzzMaxPath]
		}
		start := time.Now()
		p, err := ParsePattern(pattern)
		wantSegs, valid := globFuzzParse(pattern)
		require.Equal(t, valid, err == nil, "ParsePattern(%q): %v", pattern, err)
		if err != nil {
			require.Nil(t, p)
			require.True(t, strings.HasPrefix(err.Error(), "invalid pattern"), err.Error())
			return
		}
		require.Equal(t, wantSegs, p.segs)

		canon := p.String()
		again, err := ParsePattern(canon)
		require.NoError(t, err, "the canonical form %q of %q does not parse", canon, pattern)
		require.Equal(t, canon, again.String(), "String is not canonical")
		require.Equal(t, p.segs, again.segs)
		require.NotContains(t, canon+"/", "/**/**/", "a run of `**` is written as one")

		x := newPatternIndex()
		x.add(p, "p")
		for _, s := range []string{path, canon, pattern, "/", ""} {
			want := globFuzzMatch(p.segs, s)
			require.Equal(t, want, p.Match(s), "Match(%q) of %s", s, canon)
			require.Equal(t, want, again.Match(s), "Match(%q) of the reparsed %s", s, canon)
			require.Equal(t, want, slices.Contains(x.match(s), "p"), "index match(%q) of %s", s, canon)
		}
		// A pattern without wildcards matches exactly its own path.
		if !slices.Contains(p.segs, "*") && !slices.Contains(p.segs, "**") {
			require.True(t, p.Match(canon))
			require.Equal(t, path == canon, p.Match(path))
		}
		x.remove(p, "p")
		require.True(t, x.root.empty(), "removing the only pattern leaves the index empty")
		require.Less(t, time.Since(start), globFuzzBudget, "pattern %q, path of %d bytes", canon, len(path))
	})
}

// FuzzPatternIndex adds up to eight patterns, given one per line, to a
// pattern index and checks that a lookup finds exactly the patterns whose
// Match accepts the path, before and after removing some of them.
func FuzzPatternIndex(f *testing.F) {
	f.Add("/agents/task-1\n/agents/*\n/agents/**\n/agents/*/inbox\n/**\n/other/path", "/agents/task-1", uint8(0b10101))
	f.Add("/a/**/b\n/a/**/**/b\n/**/b\n/a/*/b\n/a/b", "/a/x/y/b", uint8(0b110))
	f.Add("/**/a/**\n/**/a/*/**/b\n/**\n/**/**", "/x/a/y/z", uint8(0xff))
	f.Add("/a/b/c\n/a/*/c\n/a/**/c\n/a/**\n/**/**/x\n/a/b", "/a/b/c", uint8(0b1))
	f.Add("/*\n/**/*\n/*/**", "/", uint8(0))
	f.Add("/a\n/a\n/a/%2A\n/a/*", "/a/x", uint8(0b100))
	f.Add(strings.Repeat("/**", 40)+"/x\n"+strings.Repeat("/**/a", 12)+"/*/b", strings.Repeat("/a", 300)+"/x", uint8(0b1))
	f.Fuzz(func(t *testing.T, patterns, path string, removed uint8) {
		if len(path) > globFuzzMaxPath {
			path = path[:globFuzzMaxPath]
		}
		start := time.Now()
		x := newPatternIndex()
		var ps []*Pattern
		lines := strings.SplitN(patterns, "\n", 9)
		for _, s := range lines[:min(len(lines), 8)] {
			if p, err := ParsePattern(s); err == nil {
				ps = append(ps, p)
				x.add(p, fmt.Sprint(len(ps)-1))
			}
		}
		check := func(live []*Pattern) {
			t.Helper()
			for _, s := range []string{path, "/"} {
				var want []string
				for i, p := range live {
					if p != nil && p.Match(s) {
						want = append(want, fmt.Sprint(i))
					}
				}
				got := x.match(s)
				require.ElementsMatch(t, want, got, "path %q", s)
				require.True(t, slices.IsSorted(got), "path %q: %v is not sorted", s, got)
			}
		}
		check(ps)
		// Removing some ids must not disturb the others, which may share
		// trie nodes with them.
		live := slices.Clone(ps)
		for i, p := range ps {
			if removed&(1<<i) != 0 {
				x.remove(p, fmt.Sprint(i))
				live[i] = nil
			}
		}
		check(live)
		for i, p := range ps {
			x.remove(p, fmt.Sprint(i))
		}
		require.True(t, x.root.empty(), "removing every pattern leaves the index empty")
		require.Less(t, time.Since(start), 4*globFuzzBudget)
	})
}

// globFuzzParse is the spec of ParsePattern: the pattern's segments, taken
// literally but for whole `*` and `**` segments, with each run of `**` as one,
// and whether the pattern is valid.
func globFuzzParse(pattern string) ([]string, bool) {
	if len(pattern) > MaxPatternLength || !utf8.ValidString(pattern) || !strings.HasPrefix(pattern, "/") {
		return nil, false
	}
	for _, r := range pattern {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return nil, false
		}
	}
	var segs []string
	for _, seg := range strings.Split(pattern[1:], "/") {
		switch {
		case seg == "", seg == ".", seg == "..":
			return nil, false
		case seg == "**" && len(segs) > 0 && segs[len(segs)-1] == "**":
		case seg == "*", seg == "**", !strings.Contains(seg, "*"):
			segs = append(segs, seg)
		default:
			return nil, false
		}
	}
	return segs, true
}

// globFuzzMatch is a reference matcher: dynamic programming over pattern
// and path segments, so it is simple and never backtracks.
func globFuzzMatch(segs []string, path string) bool {
	if !strings.HasPrefix(path, "/") || !utf8.ValidString(path) {
		return false
	}
	parts := strings.Split(path[1:], "/")
	for _, part := range parts {
		if part == "" || part == "." || part == ".." {
			return false // a path ValidateStreamPath refuses matches nothing
		}
	}
	// ok[j] reports whether segs[i:] matches parts[j:], computed from the
	// last pattern segment back.
	ok := make([]bool, len(parts)+1)
	ok[len(parts)] = true
	for i := len(segs) - 1; i >= 0; i-- {
		next := make([]bool, len(parts)+1)
		for j := len(parts); j >= 0; j-- {
			switch seg := segs[i]; {
			case seg == "**":
				next[j] = ok[j] || (j < len(parts) && next[j+1])
			case j == len(parts):
			case seg == "*":
				next[j] = parts[j] != "" && ok[j+1]
			default:
				next[j] = parts[j] == seg && ok[j+1]
			}
		}
		ok = next
	}
	return ok[0]
}
