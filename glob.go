package webhooks

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/gobwas/glob"
)

// MaxPatternLength is the longest pattern, in bytes, that ParsePattern
// accepts.
const MaxPatternLength = 1024

// Pattern is a compiled subscription glob pattern.
//
// A pattern is a '/'-separated list of segments: `*` matches exactly one
// non-empty path segment, `**` matches zero or more path segments, and any
// other segment matches itself literally. A path is split the same way
// (after its leading '/'). A path that ValidateStreamPath refuses, such as
// "/", "/a/" or "/a/../b", matches no pattern.
//
// A Pattern is safe for concurrent use.
type Pattern struct {
	canon string
	// segs are the canonical segments; "*" and "**" are the wildcards,
	// which is unambiguous because literal segments can not contain '*'.
	segs []string
	// The pattern split at its `**` segments: head must match the first
	// segments of a path, tail the last ones, and each of mids somewhere
	// in between, in order. Without `**`, head is the whole pattern.
	head, tail chunk
	mids       []chunk
	globstar   bool
}

// chunk is a run of segments with no `**`, compiled to a glob matching
// exactly n segments written "/seg/seg...".
type chunk struct {
	n int
	g *glob.Pattern
}

// ParsePattern parses and compiles a subscription pattern.
//
// The pattern must start with '/', be at most MaxPatternLength bytes of
// valid UTF-8 without control characters (C0, DEL and C1), and have no
// empty, "." or ".." segments; so "/", "/a//b" and the trailing slash of
// "/a/" are rejected ("/**" matches every path). `*` must be a whole
// segment: "foo*" and "***" are errors, as literal '*' in stream names is
// not supported. A run of `**` segments is the same as one: "/a/**/**" is
// "/a/**".
//
// s is a stream path as the host sees it, already percent-decoded, so no
// decoding is done here: the HTTP layer decodes a request path exactly once,
// which turns "%2A" into '*' (the spec makes them the same) and "%252A" into
// the literal segment "%2A". Decoding again would make that a wildcard.
//
// The error message is meant for the client, naming the offending segment.
func ParsePattern(s string) (*Pattern, error) {
	if len(s) > MaxPatternLength {
		return nil, fmt.Errorf("invalid pattern: %d bytes long, the limit is %d", len(s), MaxPatternLength)
	}
	if !strings.HasPrefix(s, "/") {
		return nil, patternError(s, "must start with '/'")
	}
	if !utf8.ValidString(s) {
		return nil, patternError(s, "is not valid UTF-8")
	}
	if r, ok := controlChar(s); ok {
		return nil, patternError(s, fmt.Sprintf("contains the control character %U", r))
	}
	if s == "/" {
		return nil, patternError(s, `has no segments; "/**" matches every path`)
	}
	if reason := segmentProblem(s); reason != "" {
		return nil, patternError(s, reason)
	}
	raw := strings.Split(s[1:], "/")
	segs := make([]string, 0, len(raw))
	for _, seg := range raw {
		switch {
		case seg == "**" && len(segs) > 0 && segs[len(segs)-1] == "**":
			// Both match the same paths; one canonical form keeps an
			// identical create idempotent.
		case seg == "*" || seg == "**":
			segs = append(segs, seg)
		case strings.Trim(seg, "*") == "":
			return nil, patternError(s, fmt.Sprintf(`segment %q: only "*" (one segment) and "**" (any number of segments) are wildcards`, seg))
		case strings.Contains(seg, "*"):
			return nil, patternError(s, fmt.Sprintf(`segment %q mixes '*' with other characters; '*' must be a whole segment`, seg))
		default:
			segs = append(segs, seg)
		}
	}
	return compilePattern(segs)
}

// controlChar returns the first control character in s: C0, DEL or C1.
func controlChar(s string) (rune, bool) {
	for _, r := range s {
		if unicode.IsControl(r) {
			return r, true
		}
	}
	return 0, false
}

func patternError(s, reason string) error {
	return fmt.Errorf("invalid pattern %q: %s", s, reason)
}

func compilePattern(segs []string) (*Pattern, error) {
	p := &Pattern{canon: "/" + strings.Join(segs, "/"), segs: segs}
	var runs [][]string
	start := 0
	for i, seg := range segs {
		if seg == "**" {
			runs = append(runs, segs[start:i])
			start = i + 1
		}
	}
	runs = append(runs, segs[start:])
	chunks := make([]chunk, 0, len(runs))
	for _, run := range runs {
		c, err := compileChunk(run)
		if err != nil {
			return nil, patternError(p.canon, err.Error())
		}
		chunks = append(chunks, c)
	}
	p.head = chunks[0]
	if len(runs) > 1 {
		p.globstar = true
		p.tail = chunks[len(chunks)-1]
		p.mids = chunks[1 : len(chunks)-1]
	}
	return p, nil
}

func compileChunk(run []string) (chunk, error) {
	if len(run) == 0 {
		return chunk{}, nil
	}
	var b strings.Builder
	for _, seg := range run {
		b.WriteByte('/')
		if seg == "*" {
			// `*` alone would match an empty segment.
			b.WriteString("?*")
		} else {
			b.WriteString(glob.QuoteMeta(seg))
		}
	}
	g, err := glob.Compile(b.String(), '/')
	return chunk{n: len(run), g: g}, err
}

// String returns the canonical form of the pattern, which parses back to
// the same pattern.
func (p *Pattern) String() string { return p.canon }

// Match reports whether the stream path matches p.
//
// Compiling the whole pattern into one glob would let gobwas backtrack
// through every placement of every `**`, which is polynomial in the path
// length with the number of `**` as the exponent. Instead the runs between
// `**` are matched as separate globs, each middle run at its leftmost
// place: `**` matches anything, so that leaves the most room for the rest.
// That bounds a match by path length × pattern length.
func (p *Pattern) Match(path string) bool {
	if !validPath(path) {
		return false
	}
	if !p.globstar {
		return p.head.g.Match(path)
	}
	// bounds[i] is the offset of the '/' that opens segment i, and the last
	// entry is len(path), so segments i..j-1 are path[bounds[i]:bounds[j]].
	bounds := make([]int, 0, 16)
	for i := range len(path) {
		if path[i] == '/' {
			bounds = append(bounds, i)
		}
	}
	bounds = append(bounds, len(path))
	n := len(bounds) - 1
	matches := func(c chunk, at int) bool {
		return c.n == 0 || c.g.Match(path[bounds[at]:bounds[at+c.n]])
	}
	end := n - p.tail.n
	if p.head.n > end || !matches(p.head, 0) || !matches(p.tail, end) {
		return false
	}
	at := p.head.n
	for _, c := range p.mids {
		for at+c.n <= end && !matches(c, at) {
			at++
		}
		if at+c.n > end {
			return false
		}
		at += c.n
	}
	return true
}

// patternIndex finds the ids whose patterns match a stream path, for the
// engine to call on every append. It is a trie of pattern segments, so a
// lookup costs per path segment and per matching trie node, not per
// subscription. It is safe for concurrent use.
type patternIndex struct {
	mu   sync.RWMutex
	root *indexNode
}

type indexNode struct {
	children map[string]*indexNode // literal segments
	star     *indexNode
	globstar *indexNode
	// loop marks a node reached by a `**` edge: it consumes any number of
	// further segments and stays put.
	loop bool
	ids  map[string]struct{}
}

func newPatternIndex() *patternIndex {
	return &patternIndex{root: &indexNode{}}
}

// add registers id under p. The index is a set: adding the same pair twice
// is the same as adding it once.
func (x *patternIndex) add(p *Pattern, id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := x.root
	for _, seg := range p.segs {
		n = n.child(seg)
	}
	if n.ids == nil {
		n.ids = make(map[string]struct{})
	}
	n.ids[id] = struct{}{}
}

// child returns the node for seg under n, creating it if needed.
func (n *indexNode) child(seg string) *indexNode {
	switch seg {
	case "*":
		if n.star == nil {
			n.star = &indexNode{}
		}
		return n.star
	case "**":
		if n.globstar == nil {
			n.globstar = &indexNode{loop: true}
		}
		return n.globstar
	}
	c := n.children[seg]
	if c == nil {
		if n.children == nil {
			n.children = make(map[string]*indexNode)
		}
		c = &indexNode{}
		n.children[seg] = c
	}
	return c
}

// remove unregisters id from p, pruning the nodes left empty. It is a no-op
// if the pair is absent.
func (x *patternIndex) remove(p *Pattern, id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.root.remove(p.segs, id)
}

// remove deletes id under segs and reports whether n is left empty.
func (n *indexNode) remove(segs []string, id string) bool {
	if len(segs) == 0 {
		delete(n.ids, id)
		return n.empty()
	}
	seg := segs[0]
	var c *indexNode
	switch seg {
	case "*":
		c = n.star
	case "**":
		c = n.globstar
	default:
		c = n.children[seg]
	}
	if c == nil || !c.remove(segs[1:], id) {
		return false
	}
	switch seg {
	case "*":
		n.star = nil
	case "**":
		n.globstar = nil
	default:
		delete(n.children, seg)
	}
	return n.empty()
}

func (n *indexNode) empty() bool {
	return len(n.ids) == 0 && len(n.children) == 0 && n.star == nil && n.globstar == nil
}

// match returns the ids whose patterns match path, each once, sorted.
//
// It runs the trie as an NFA: after each segment it holds the set of nodes
// reached, without duplicates. A `**` therefore costs one extra node per
// step instead of a branch per way to split the path, which is what keeps
// patterns like "/**/**/**/x" linear.
func (x *patternIndex) match(path string) []string {
	if !validPath(path) {
		return nil
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	// seen[n] is the last step n was added at.
	seen := make(map[*indexNode]int)
	step := 0
	cur := addNode(nil, x.root, seen, step)
	var next []*indexNode
	for rest, more := path[1:], true; more && len(cur) > 0; {
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
		step++
		next = next[:0]
		for _, n := range cur {
			next = addNode(next, n.children[seg], seen, step)
			next = addNode(next, n.star, seen, step) // seg is not empty: validPath
			if n.loop {
				next = addNode(next, n, seen, step)
			}
		}
		cur, next = next, cur
	}
	var ids []string
	for _, n := range cur {
		for id := range n.ids {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// addNode appends n, and the nodes its `**` edges reach without consuming
// a segment, to list unless they are already there at this step.
func addNode(list []*indexNode, n *indexNode, seen map[*indexNode]int, step int) []*indexNode {
	for ; n != nil; n = n.globstar {
		if s, ok := seen[n]; ok && s == step {
			return list
		}
		seen[n] = step
		list = append(list, n)
	}
	return list
}
