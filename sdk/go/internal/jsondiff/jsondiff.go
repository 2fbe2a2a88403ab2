// Package jsondiff compares JSON documents as values, for tests that check that an object
// survives a trip through the Go types or the API server.
package jsondiff

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
)

// Diff compares two JSON documents as values and describes the first difference, or
// returns "" when they are equal. null members count as absent.
func Diff(want, got []byte) string {
	var a, b any
	if err := json.Unmarshal(want, &a); err != nil {
		return "want: " + err.Error()
	}
	if err := json.Unmarshal(got, &b); err != nil {
		return "got: " + err.Error()
	}
	return diffValues("", dropNulls(a), dropNulls(b))
}

func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for key, value := range v {
			if value != nil {
				out[key] = dropNulls(value)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, value := range v {
			out[i] = dropNulls(value)
		}
		return out
	default:
		return v
	}
}

func diffValues(path string, a, b any) string {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %v", path, b)
		}
		keys := map[string]bool{}
		for key := range a {
			keys[key] = true
		}
		for key := range bm {
			keys[key] = true
		}
		sorted := make([]string, 0, len(keys))
		for key := range keys {
			sorted = append(sorted, key)
		}
		sort.Strings(sorted)
		for _, key := range sorted {
			av, inA := a[key]
			bv, inB := bm[key]
			switch {
			case !inA:
				return fmt.Sprintf("%s.%s: unexpected %v", path, key, bv)
			case !inB:
				return fmt.Sprintf("%s.%s: missing (want %v)", path, key, av)
			}
			if diff := diffValues(path+"."+key, av, bv); diff != "" {
				return diff
			}
		}
		return ""
	case []any:
		bs, ok := b.([]any)
		if !ok || len(bs) != len(a) {
			return fmt.Sprintf("%s: want %v, got %v", path, a, b)
		}
		for i := range a {
			if diff := diffValues(fmt.Sprintf("%s[%d]", path, i), a[i], bs[i]); diff != "" {
				return diff
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(a, b) {
			return fmt.Sprintf("%s: want %v (%T), got %v (%T)", path, a, a, b, b)
		}
		return ""
	}
}
