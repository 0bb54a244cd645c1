package webhooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// decodeJSON decodes exactly one JSON value from data into v. The body
// must be valid UTF-8, which encoding/json would silently repair,
// and every object key must be exactly the json name of a field of the
// struct it decodes into: encoding/json matches names regardless of case.
func decodeJSON(data []byte, v any) error {
	if !utf8.Valid(data) {
		return errors.New("body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after JSON value")
	}
	return exactKeys(data, reflect.TypeOf(v))
}

// exactKeys checks the object keys of data, one valid JSON value that was
// decoded into a value of type t, against the json names of the fields of
// the structs they decoded into. The keys of an object are checked in
// sorted order, so the error is stable. It walks data in place and
// allocates only to unquote a key with escapes.
func exactKeys(data []byte, t reflect.Type) error {
	_, err := keysOf(data, skipSpace(data, 0), t)
	return err
}

// keysOf checks the value of type t at data[i:] and returns where it ends.
// A nil t checks nothing.
func keysOf(data []byte, i int, t reflect.Type) (int, error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch data[i] {
	case '{':
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		var (
			firstErr error
			firstKey string
		)
		i = skipSpace(data, i+1)
		for data[i] != '}' {
			end := stringEnd(data, i)
			key, err := jsonKey(data[i:end])
			if err != nil {
				return 0, err
			}
			i = skipSpace(data, skipSpace(data, end)+1) // past ':'
			var ft reflect.Type
			known := true
			if fields != nil {
				ft, known = fields[key]
			}
			if !known {
				err = fmt.Errorf("json: unknown field %q (names are case-sensitive)", key)
			}
			if i, err = keysValue(data, i, ft, err); err != nil && (firstErr == nil || key < firstKey) {
				firstErr, firstKey = err, key
			}
			i = skipSpace(data, i)
			if data[i] == ',' {
				i = skipSpace(data, i+1)
			}
		}
		return i + 1, firstErr
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		var firstErr error
		i = skipSpace(data, i+1)
		for data[i] != ']' {
			var err error
			if i, err = keysOf(data, i, elem); err != nil && firstErr == nil {
				firstErr = err
			}
			i = skipSpace(data, i)
			if data[i] == ',' {
				i = skipSpace(data, i+1)
			}
		}
		return i + 1, firstErr
	case '"':
		return stringEnd(data, i), nil
	default:
		for i < len(data) && !strings.ContainsRune(",}] \t\r\n", rune(data[i])) {
			i++
		}
		return i, nil
	}
}

// keysValue checks the value at data[i:] of a key whose own error, if any,
// is keyErr, and returns where the value ends and the key's error.
func keysValue(data []byte, i int, t reflect.Type, keyErr error) (int, error) {
	if keyErr != nil {
		t = nil
	}
	end, err := keysOf(data, i, t)
	if keyErr != nil {
		return end, keyErr
	}
	return end, err
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n') {
		i++
	}
	return i
}

// stringEnd returns the index just past the JSON string that starts at
// data[i].
func stringEnd(data []byte, i int) int {
	for i++; data[i] != '"'; i++ {
		if data[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// jsonKey unquotes the JSON string quoted.
func jsonKey(quoted []byte) (string, error) {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1 : len(quoted)-1]), nil
	}
	var key string
	err := json.Unmarshal(quoted, &key)
	return key, err
}

// fieldsByType caches jsonFields.
var fieldsByType sync.Map // reflect.Type → map[string]reflect.Type

// jsonFields maps the json names of the exported fields of the struct type
// t to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsByType.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			// Promoted, as encoding/json promotes them, even from an
			// unexported struct.
			for name, ft := range jsonFields(f.Type) {
				if _, dup := m[name]; !dup {
					m[name] = ft
				}
			}
			continue
		}
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		if _, dup := m[name]; !dup {
			m[name] = f.Type
		}
	}
	fieldsByType.Store(t, m)
	return m
}
