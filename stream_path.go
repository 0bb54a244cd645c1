package webhooks

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// ValidateStreamPath checks that path can name a stream: it must start with
// '/', be valid UTF-8, and have no empty, "." or ".." segments, the same
// segments that ParsePattern refuses. So "/", "/a//b", "/a/" and "/a/../b"
// are refused. Such a path never matches a Pattern and never gets a
// consumer: a client that normalises it would read another stream.
//
// A host calls it on the decoded path before it creates a stream, and
// answers 400 with the error's Reason. The error is a *ValidationError of
// field "path". StreamCreated and StreamAppended also refuse a path longer
// than MaxStreamPathLength or with a control character.
func ValidateStreamPath(path string) error {
	switch {
	case !strings.HasPrefix(path, "/"):
		return invalid("path", "stream path %.64q must start with '/'", path)
	case !utf8.ValidString(path):
		return invalid("path", "stream path %.64q is not valid UTF-8", path)
	}
	if reason := segmentProblem(path); reason != "" {
		return invalid("path", "stream path %.64q: %s", path, reason)
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
