package webhooks

import (
	"encoding/json"
	"slices"
	"strings"
)

// Limits on columns, the fields of each event that event push sends.
const (
	maxColumns      = 64
	maxColumnLength = 256
)

// projection is a list of columns ready to apply: each column's dotted
// path.
type projection [][]string

// compileColumns checks columns and compiles them; none sends events
// whole.
func compileColumns(columns []string) (projection, error) {
	if len(columns) == 0 {
		return nil, nil
	}
	if len(columns) > maxColumns {
		return nil, invalid("columns", "columns has more than %d fields", maxColumns)
	}
	out := make(projection, 0, len(columns))
	for i, c := range columns {
		if c == "" || len(c) > maxColumnLength {
			return nil, invalid("columns", "column %q must have 1 to %d bytes", c, maxColumnLength)
		}
		if slices.Contains(columns[:i], c) {
			return nil, invalid("columns", "column %q is given twice", c)
		}
		path := strings.Split(c, ".")
		if slices.Contains(path, "") {
			return nil, invalid("columns", "column %q has an empty segment", c)
		}
		out = append(out, path)
	}
	return out, nil
}

// apply returns event with only the projection's fields, each at its
// path; a field the event lacks is left out, and a column inside another
// is part of it. An event that is not a JSON object is returned as it is:
// columns name fields, and it has none to leave out.
func (p projection) apply(event json.RawMessage) json.RawMessage {
	if p == nil {
		return event
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(event, &obj) != nil || obj == nil {
		return event
	}
	out := map[string]any{}
	for _, path := range p {
		if v, ok := lookup(obj, path); ok {
			place(out, path, v)
		}
	}
	b, err := json.Marshal(out)
	if err != nil { // cannot happen: every value is valid JSON
		return event
	}
	return b
}

// lookup is the value at path in obj.
func lookup(obj map[string]json.RawMessage, path []string) (json.RawMessage, bool) {
	v, ok := obj[path[0]]
	for _, name := range path[1:] {
		if !ok {
			break
		}
		var inner map[string]json.RawMessage
		if json.Unmarshal(v, &inner) != nil {
			return nil, false
		}
		v, ok = inner[name]
	}
	return v, ok
}

// place sets v at path in out, unless a column that contains path is set:
// that one has v already. A column that contains others replaces them.
func place(out map[string]any, path []string, v json.RawMessage) {
	for _, name := range path[:len(path)-1] {
		next, ok := out[name].(map[string]any)
		if !ok {
			if _, whole := out[name].(json.RawMessage); whole {
				return
			}
			next = map[string]any{}
			out[name] = next
		}
		out = next
	}
	out[path[len(path)-1]] = v
}
