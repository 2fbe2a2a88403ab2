// Package deepcopytest checks generated DeepCopy methods by reflection: it fills every field of
// an object, copies it, and proves that the copy shares no memory with the original. It is
// test support for the generated API packages, not part of the SDK's API.
package deepcopytest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var (
	timeType        = reflect.TypeOf(metav1.Time{})
	quantityType    = reflect.TypeOf(resource.Quantity{})
	intOrStringType = reflect.TypeOf(intstr.IntOrString{})
)

// fillBytes is what every []byte gets: a JSON string, so that json.RawMessage-like fields
// (apiextensionsv1.JSON, runtime.RawExtension, metav1.FieldsV1) stay valid JSON, made of 'a's
// that mutate turns into 'b's in place.
const fillBytes = `"aaaa"`

// Fill sets every field reachable from ptr (a non-nil pointer) to a non-zero value: pointers
// point at filled values, slices and maps hold two filled entries, strings are "aaaa", and
// Kubernetes leaf types get valid values. Interface fields stay nil.
func Fill(ptr any) {
	fill(reflect.ValueOf(ptr).Elem())
}

func fill(v reflect.Value) {
	switch v.Type() {
	case timeType:
		v.Set(reflect.ValueOf(metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))))
		return
	case quantityType:
		v.Set(reflect.ValueOf(resource.MustParse("1500m")))
		return
	case intOrStringType:
		v.Set(reflect.ValueOf(intstr.FromString("aaaa")))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte(fillBytes))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := 0; i < 2; i++ {
			fill(v.Index(i))
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for _, key := range []string{"k1", "k2"} {
			value := reflect.New(v.Type().Elem()).Elem()
			fill(value)
			v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), value)
		}
	case reflect.String:
		v.SetString("aaaa")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Interface:
		// runtime.RawExtension.Object and the like: left nil.
	default:
		panic(fmt.Sprintf("deepcopytest: cannot fill a %s", v.Type()))
	}
}

// mutate changes every value reachable from v in place: through pointers, slice elements and
// map entries, so that a change shows in any other value that shares memory with v.
func mutate(v reflect.Value) {
	switch v.Type() {
	case timeType:
		v.Set(reflect.ValueOf(metav1.NewTime(v.Interface().(metav1.Time).Add(time.Hour))))
		return
	case quantityType:
		v.Set(reflect.ValueOf(resource.MustParse("42Gi")))
		return
	case intOrStringType:
		v.FieldByName("StrVal").SetString(v.FieldByName("StrVal").String() + "x")
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			mutate(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				mutate(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			raw := v.Bytes()
			for i := range raw {
				if raw[i] == 'a' {
					raw[i] = 'b'
				}
			}
			return
		}
		for i := 0; i < v.Len(); i++ {
			mutate(v.Index(i))
		}
	case reflect.Map:
		for _, key := range v.MapKeys() {
			value := reflect.New(v.Type().Elem()).Elem()
			value.Set(v.MapIndex(key))
			mutate(value)
			v.SetMapIndex(key, value)
		}
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(v.Float() + 1)
	}
}

// sharedMemory returns the path of the first pointer, slice backing array or map that a and b
// (values of one type) share, or "" when they share none. Time and Quantity are leaves: their
// deep copies are apimachinery's.
func sharedMemory(path string, a, b reflect.Value) string {
	if a.Type() == timeType || a.Type() == quantityType {
		return ""
	}
	switch a.Kind() {
	case reflect.Pointer:
		// Go may give every zero-size allocation the same address; that shares nothing.
		if a.IsNil() || b.IsNil() || a.Type().Elem().Size() == 0 {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return sharedMemory(path, a.Elem(), b.Elem())
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if a.Type().Field(i).IsExported() {
				if shared := sharedMemory(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i)); shared != "" {
					return shared
				}
			}
		}
	case reflect.Slice:
		if a.Len() == 0 || b.Len() == 0 || a.Type().Elem().Size() == 0 {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		for i := 0; i < a.Len() && i < b.Len(); i++ {
			if shared := sharedMemory(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i)); shared != "" {
				return shared
			}
		}
	case reflect.Map:
		if a.IsNil() || b.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		for _, key := range a.MapKeys() {
			if bv := b.MapIndex(key); bv.IsValid() {
				if shared := sharedMemory(fmt.Sprintf("%s[%v]", path, key), a.MapIndex(key), bv); shared != "" {
					return shared
				}
			}
		}
	}
	return ""
}

// CheckDeepCopy fills a new value of obj's type (obj is a pointer whose type has a DeepCopy
// method returning the same pointer type), deep-copies it, and fails t unless the copy equals
// the original, shares no memory with it, and leaves it unchanged when every field of the copy
// is mutated in place.
func CheckDeepCopy(t testing.TB, obj any) {
	t.Helper()
	typ := reflect.TypeOf(obj)
	original := reflect.New(typ.Elem())
	fill(original.Elem())
	deepCopy := original.MethodByName("DeepCopy")
	if !deepCopy.IsValid() {
		t.Fatalf("%s has no DeepCopy method", typ)
	}
	copied := deepCopy.Call(nil)[0]
	if !reflect.DeepEqual(original.Interface(), copied.Interface()) {
		t.Fatalf("%s: DeepCopy() differs from the original", typ)
	}
	if shared := sharedMemory(typ.Elem().Name(), original.Elem(), copied.Elem()); shared != "" {
		t.Fatalf("%s: DeepCopy() shares memory with the original at %s", typ, shared)
	}
	before, err := json.Marshal(original.Interface())
	if err != nil {
		t.Fatalf("%s: marshal the original: %v", typ, err)
	}
	mutate(copied.Elem())
	after, err := json.Marshal(original.Interface())
	if err != nil {
		t.Fatalf("%s: marshal the original after mutating the copy: %v", typ, err)
	}
	if string(before) != string(after) {
		t.Fatalf("%s: mutating the copy changed the original:\nbefore %s\nafter  %s", typ, before, after)
	}
	mutated, err := json.Marshal(copied.Interface())
	if err != nil {
		t.Fatalf("%s: marshal the mutated copy: %v", typ, err)
	}
	if string(mutated) == string(before) && string(before) != "{}" {
		t.Fatalf("%s: mutating the copy changed nothing; the check proves nothing", typ)
	}
}

// Types returns a new pointer value for every named type among the exported package-level
// declarations reachable from roots: the roots themselves and every struct type their fields
// use that lives in the same package (so nested generated types are checked one by one too).
func Types(roots ...any) []any {
	seen := map[reflect.Type]bool{}
	var out []any
	var visit func(t reflect.Type, pkg string)
	visit = func(t reflect.Type, pkg string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != pkg || seen[t] {
			return
		}
		seen[t] = true
		out = append(out, reflect.New(t).Interface())
		for i := 0; i < t.NumField(); i++ {
			visit(t.Field(i).Type, pkg)
		}
	}
	for _, root := range roots {
		t := reflect.TypeOf(root).Elem()
		visit(t, t.PkgPath())
	}
	return out
}
