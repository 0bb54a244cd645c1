package webhooks

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ValidateStreamPath checks that path can name a stream that gets
// consumers: it must start with '/', be valid UTF-8 of at most
// MaxStreamPathLength bytes with no control character (a consumer names
// its streams in callbacks), and have no empty, "." or ".." segments, the
// same segments that ParsePattern refuses. So "/", "/a//b", "/a/" and
// "/a/../b" are refused. Such a path never matches a Pattern and never
// gets a consumer: a client that normalises it would read another stream.
//
// A host calls it on the decoded path before it creates a stream, and
// answers 400 with the error's Reason; StreamCreated and StreamAppended
// refuse such a path with the same error. The error is a *ValidationError
// of field "path".
func ValidateStreamPath(path string) error {
	if err := nameableStreamPath(path); err != nil {
		return invalid("path", "%v", err)
	}
	if reason := segmentProblem(path); reason != "" {
		return invalid("path", "stream path %.64q: %s", path, reason)
	}
	return nil
}

// nameableStreamPath checks that a callback can name stream path p: an
// ack or unsubscribe may name a stream that an older release gave a
// consumer, whose segments ValidateStreamPath now refuses.
func nameableStreamPath(p string) error {
	if !strings.HasPrefix(p, "/") || len(p) > MaxStreamPathLength {
		return fmt.Errorf("stream path %.64q must start with '/' and be at most %d characters", p, MaxStreamPathLength)
	}
	if r, ok := controlChar(p); ok {
		return fmt.Errorf("stream path %.64q contains the control character %U", p, r)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("stream path %.64q is not valid UTF-8", p)
	}
	return nil
}

// validPath reports whether ValidateStreamPath accepts path, without
// allocating: Match and the pattern index call it on every lookup.
func validPath(path string) bool {
	return strings.HasPrefix(path, "/") && utf8.ValidString(path) && segmentProblem(path) == ""
}

// segmentProblem says what is wrong with the segments of s, a stream path
// or a pattern starting with '/', or returns "" if nothing is: the rule
// that patterns and stream paths share.
func segmentProblem(s string) string {
	if s == "/" {
		return "has no segments"
	}
	for rest, more := s[1:], true; more; {
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
		switch {
		case seg == "" && !more:
			return "must not end with '/'"
		case seg == "":
			return `has an empty segment ("//")`
		case seg == "." || seg == "..":
			return fmt.Sprintf("segment %q is not allowed", seg)
		}
	}
	return ""
}
