package webhooks

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/streamhooks/webhooks/receiver"
)

// treeExactKeys is exactKeys as a check of the tree json.Unmarshal builds:
// slower, and plainly right, so the walk over the bytes is checked against
// it.
func treeExactKeys(v any, t reflect.Type) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := v.(type) {
	case map[string]any:
		if t.Kind() != reflect.Struct {
			return nil
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(v)) {
			ft, ok := fields[k]
			if !ok {
				return fmt.Errorf("json: unknown field %q (names are case-sensitive)", k)
			}
			if err := treeExactKeys(v[k], ft); err != nil {
				return err
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for _, e := range v {
				if err := treeExactKeys(e, t.Elem()); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// FuzzExactKeys checks that exactKeys reports what treeExactKeys does for
// every body the strict decoder gets as far as checking, duplicate keys
// aside: the tree keeps only the last of them.
func FuzzExactKeys(f *testing.F) {
	for _, body := range []string{
		`{"epoch":1,"acks":[{"path":"/a","offset":"1"}],"done":true}`,
		` { "epoch" : 1 , "Acks" : [ ] , "Done" : true } `,
		`{"epoch":1,"acks":[{"path":"/a","offset":"1"},{"PATH":"/a","offset":"1"}]}`,
		`{"epoch":1,"acks":[{"path":"/a","Offset":"1"}],"Done":true}`,
		`{"epoch":1,"Subscribe":["/a"],"acks":[{"Path":"/a","offset":"1"}]}`,
		`{"\u0065poch":1,"w\"ake_id":"x"}`,
		`{"epoch":1,"wake_id":"a\"b\\","subscribe":["/{\"x\":1}"]}`,
		`{"epoch":-1.5e3,"acks":null,"subscribe":null,"done":false}`,
		`{"Webhook":"https://x","DESCRIPTION":"d"}`,
		`null`,
		`{}`,
	} {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, v := range []any{&receiver.CallbackRequest{}, &createRequest{}} {
			var tree any
			// Bodies that are not UTF-8 are refused before the keys.
			if !utf8.ValidString(body) || json.Unmarshal([]byte(body), &tree) != nil || hasDuplicateKeys(body) {
				return
			}
			want := treeExactKeys(tree, reflect.TypeOf(v))
			require.Equal(t, fmt.Sprint(want), fmt.Sprint(exactKeys([]byte(body), reflect.TypeOf(v))), "%s into %T", body, v)
		}
	})
}

// hasDuplicateKeys reports whether an object in the JSON body has a key
// twice.
func hasDuplicateKeys(body string) bool {
	dec := json.NewDecoder(strings.NewReader(body))
	var stack []map[string]bool
	expectKey := []bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				stack = append(stack, map[string]bool{})
				expectKey = append(expectKey, true)
				continue
			case '[':
				stack = append(stack, nil)
				expectKey = append(expectKey, false)
				continue
			default:
				stack, expectKey = stack[:len(stack)-1], expectKey[:len(expectKey)-1]
			}
		case string:
			if n := len(stack); n > 0 && stack[n-1] != nil && expectKey[n-1] {
				if stack[n-1][tok] {
					return true
				}
				stack[n-1][tok] = true
				expectKey[n-1] = false
				continue
			}
		}
		if n := len(stack); n > 0 && stack[n-1] != nil {
			expectKey[n-1] = true
		}
	}
}
