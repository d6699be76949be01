package handlers

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"

	"homework/engine/spec"
)

var rawMessageType = reflect.TypeOf(json.RawMessage(nil))

// checkKeys refuses JSON object keys that do not name a field of t exactly:
// encoding/json matches keys case-insensitively ("Objective" would set
// objective) and names an unknown nested field without its path. The error
// names the full path ("budgets.max_iters"). A body that is not valid JSON
// passes, for the decoder to describe.
func checkKeys(body []byte, t reflect.Type) error {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil
	}
	return checkValue(v, t, "")
}

func checkValue(v any, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		return nil // opaque by design (a script)
	}
	switch val := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			return checkObject(val, t, path)
		case reflect.Map:
			for k, e := range val {
				if err := checkValue(e, t.Elem(), join(path, k)); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range val {
				if err := checkValue(e, t.Elem(), path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func checkObject(obj map[string]any, t reflect.Type, path string) error {
	fields := jsonFields(t)
	for k, e := range obj {
		ft, ok := fields[k]
		if !ok {
			for name := range fields {
				if strings.EqualFold(name, k) {
					return spec.FieldError(join(path, k), "Unknown field %q: JSON keys are case-sensitive; did you mean %q?", join(path, k), join(path, name))
				}
			}
			return spec.FieldError(join(path, k), "Unknown field %q.", join(path, k))
		}
		if err := checkValue(e, ft, join(path, k)); err != nil {
			return err
		}
	}
	return nil
}

// jsonFields returns the JSON names of t's fields (embedded structs
// flattened) with their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
