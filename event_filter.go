package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/gobwas/glob"
)

// Limits on an EventFilter, so that matching stays cheap per event.
const (
	maxFilterPatterns      = 32
	maxFilterPatternLength = 256
	maxFilterFieldLength   = 256
)

// eventFilter is an EventFilter ready to match events.
type eventFilter struct {
	path []string // the field's dotted path; nil without patterns
	// re matches a value that one of the patterns matches. Go's regexp
	// runs in time linear in the value's length; gobwas, which checks the
	// patterns' syntax, backtracks, and a pattern such as
	// `*a*a*a*a*a*a*a*a*a*a*c*` made one 81-byte event take a core for good.
	re   *regexp.Regexp
	expr *eventExpression // nil without an expression
}

// compileFilter checks f against the filter's rules and limits and
// compiles it; a nil filter matches every event. It refuses f with a
// *ValidationError naming the filter's field at fault.
func compileFilter(f *EventFilter) (*eventFilter, error) {
	if f == nil {
		return nil, nil
	}
	out := &eventFilter{}
	if f.Expression != "" {
		expr, err := compileExpression(f.Expression)
		if err != nil {
			return nil, err
		}
		out.expr = expr
	}
	if f.Field == "" && len(f.Patterns) == 0 && out.expr != nil {
		return out, nil
	}
	if err := compilePatterns(out, f); err != nil {
		return nil, asInvalid("filter.patterns", err)
	}
	return out, nil
}

// compilePatterns compiles f's field and patterns into out. '**' may only
// be a pattern's last segment, which keeps matching linear in the field's
// length.
func compilePatterns(out *eventFilter, f *EventFilter) error {
	switch {
	case f.Field == "":
		return invalid("filter.field", "filter.field is required with filter.patterns, or give filter.expression")
	case len(f.Field) > maxFilterFieldLength:
		return invalid("filter.field", "filter.field is longer than %d bytes", maxFilterFieldLength)
	case len(f.Patterns) == 0:
		return errors.New("filter.patterns needs at least one pattern")
	case len(f.Patterns) > maxFilterPatterns:
		return fmt.Errorf("filter.patterns has more than %d patterns", maxFilterPatterns)
	}
	path := strings.Split(f.Field, ".")
	for _, p := range path {
		if p == "" {
			return invalid("filter.field", "filter.field %q has an empty segment", f.Field)
		}
	}
	alts := make([]string, 0, len(f.Patterns))
	for _, p := range f.Patterns {
		re, err := patternRegexp(p)
		if err != nil {
			return err
		}
		alts = append(alts, re)
	}
	re, err := regexp.Compile(`^(?:` + strings.Join(alts, "|") + `)$`)
	if err != nil {
		return fmt.Errorf("filter patterns: %v", err)
	}
	out.path, out.re = path, re
	return nil
}

// patternRegexp checks one filter pattern against the rules and limits
// and returns the regular expression that matches what it does.
func patternRegexp(p string) (string, error) {
	if p == "" || len(p) > maxFilterPatternLength {
		return "", fmt.Errorf("filter pattern %q must have 1 to %d bytes", p, maxFilterPatternLength)
	}
	if i := strings.Index(p, "**"); i >= 0 && (p[i:] != "**" || (i > 0 && p[i-1] != '.')) {
		return "", fmt.Errorf("filter pattern %q: '**' may only be the last segment", p)
	}
	if _, err := glob.Compile(p, '.'); err != nil {
		return "", fmt.Errorf("filter pattern %q: %v", p, err)
	}
	re, err := globRegexp(p)
	if err != nil {
		return "", fmt.Errorf("filter pattern %q: %v", p, err)
	}
	return re, nil
}

// globRegexp translates a filter pattern, in gobwas's syntax with '.' as
// the separator, to a regular expression that matches the same strings:
// `*` any run without '.', `**` any run, `?` one rune but '.', `[...]` and
// `[!...]` one rune of (or not of) a list or range, `{a,b}` either
// alternative, and `\` quotes the next rune.
func globRegexp(p string) (string, error) {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRuneInString(p[i:])
		i += n
		switch {
		case r == '\\':
			if i >= len(p) {
				return "", errors.New("ends with an escape")
			}
			r, n = utf8.DecodeRuneInString(p[i:])
			i += n
			b.WriteString(regexp.QuoteMeta(string(r)))
		case r == '*' && strings.HasPrefix(p[i:], "*"):
			i++
			b.WriteString(`(?s:.*)`)
		case r == '*':
			b.WriteString(`[^.]*`)
		case r == '?':
			b.WriteString(`[^.]`)
		case r == '[':
			end, class, err := globClass(p[i:])
			if err != nil {
				return "", err
			}
			i += end
			b.WriteString(class)
		case r == '{':
			depth++
			b.WriteString(`(?:`)
		case r == ',' && depth > 0:
			b.WriteByte('|')
		case r == '}' && depth > 0:
			depth--
			b.WriteByte(')')
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	if depth != 0 {
		return "", errors.New("unclosed '{'")
	}
	return b.String(), nil
}

// globClass translates the class that follows a '[' at the start of s,
// returning how many bytes of s it took, its closing ']' included. As in
// gobwas's lexer, a class is a range, one character, '-' and one
// character, read as they are; or else a list of characters, '-' among
// them, with '\' escapes. Either may start with '!'.
func globClass(s string) (int, string, error) {
	var b strings.Builder
	b.WriteByte('[')
	i := 0
	if strings.HasPrefix(s, "!") {
		b.WriteByte('^')
		i++
	}
	if lo, n := utf8.DecodeRuneInString(s[i:]); n > 0 && strings.HasPrefix(s[i+n:], "-") {
		hi, m := utf8.DecodeRuneInString(s[i+n+1:])
		j := i + n + 1 + m
		if m == 0 || !strings.HasPrefix(s[j:], "]") {
			return 0, "", errors.New("a range is one character, '-' and one character")
		}
		fmt.Fprintf(&b, `\x{%x}-\x{%x}]`, lo, hi)
		return j + 1, b.String(), nil
	}
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch r {
		case ']':
			return i, b.String() + "]", nil
		case '\\':
			if i >= len(s) {
				return 0, "", errors.New("ends with an escape")
			}
			r, n = utf8.DecodeRuneInString(s[i:])
			i += n
		}
		fmt.Fprintf(&b, `\x{%x}`, r)
	}
	return 0, "", errors.New("unclosed '['")
}

// passes reports whether event, a JSON value, passes the filter: its
// field matches (match), and the expression holds for it. An error is the
// expression's: the event does not pass.
func (f *eventFilter) passes(ctx context.Context, event []byte) (bool, error) {
	if f == nil {
		return true, nil
	}
	if !f.match(event) {
		return false, nil
	}
	if f.expr != nil {
		return f.expr.match(ctx, event)
	}
	return true, nil
}

// match reports whether event, a JSON value, has a string at the
// filter's field that one of its patterns matches, or the filter has no
// patterns.
func (f *eventFilter) match(event []byte) bool {
	if f == nil || f.re == nil {
		return true
	}
	value, ok := f.field(event)
	return ok && f.re.MatchString(value)
}

// field is the string at the filter's field of event, a JSON value, and
// false if it has none or the filter names no field.
func (f *eventFilter) field(event []byte) (string, bool) {
	if f == nil || f.path == nil {
		return "", false
	}
	raw := json.RawMessage(event)
	for _, name := range f.path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return "", false
		}
		var ok bool
		if raw, ok = obj[name]; !ok {
			return "", false
		}
	}
	var value string
	if json.Unmarshal(raw, &value) != nil {
		return "", false
	}
	return value, true
}
