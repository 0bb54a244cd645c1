package webhooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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
	path  []string // the field's dotted path
	globs []*glob.Pattern
}

// compileFilter checks f against the filter's rules and limits and
// compiles it; a nil filter matches every event. '**' may only be a
// pattern's last segment, which keeps matching linear in the field's
// length.
func compileFilter(f *EventFilter) (*eventFilter, error) {
	if f == nil {
		return nil, nil
	}
	switch {
	case f.Field == "":
		return nil, errors.New("filter.field is required")
	case len(f.Field) > maxFilterFieldLength:
		return nil, fmt.Errorf("filter.field is longer than %d bytes", maxFilterFieldLength)
	case len(f.Patterns) == 0:
		return nil, errors.New("filter.patterns needs at least one pattern")
	case len(f.Patterns) > maxFilterPatterns:
		return nil, fmt.Errorf("filter.patterns has more than %d patterns", maxFilterPatterns)
	}
	path := strings.Split(f.Field, ".")
	for _, p := range path {
		if p == "" {
			return nil, fmt.Errorf("filter.field %q has an empty segment", f.Field)
		}
	}
	out := &eventFilter{path: path}
	for _, p := range f.Patterns {
		if p == "" || len(p) > maxFilterPatternLength {
			return nil, fmt.Errorf("filter pattern %q must have 1 to %d bytes", p, maxFilterPatternLength)
		}
		if i := strings.Index(p, "**"); i >= 0 && (p[i:] != "**" || (i > 0 && p[i-1] != '.')) {
			return nil, fmt.Errorf("filter pattern %q: '**' may only be the last segment", p)
		}
		g, err := glob.Compile(p, '.')
		if err != nil {
			return nil, fmt.Errorf("filter pattern %q: %v", p, err)
		}
		out.globs = append(out.globs, g)
	}
	return out, nil
}

// match reports whether event, a JSON value, has a string at the filter's
// field that one of its patterns matches.
func (f *eventFilter) match(event []byte) bool {
	if f == nil {
		return true
	}
	raw := json.RawMessage(event)
	for _, name := range f.path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return false
		}
		var ok bool
		if raw, ok = obj[name]; !ok {
			return false
		}
	}
	var value string
	if json.Unmarshal(raw, &value) != nil {
		return false
	}
	for _, g := range f.globs {
		if g.Match(value) {
			return true
		}
	}
	return false
}
