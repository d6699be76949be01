package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"homework/engine/spec"

	"github.com/gofiber/fiber/v2"
)

// decodeJSON decodes the request body into v, refusing unknown fields and
// trailing data. An empty body is an error unless optional. A body that is
// not declared as JSON is 415; malformed JSON and wrong types are EINVALID,
// naming the field when there is one.
func decodeJSON(c *fiber.Ctx, v any, optional bool) error {
	body := c.Body()
	if len(bytes.TrimSpace(body)) == 0 && optional {
		return nil
	}
	if !isJSONContentType(c.Get(fiber.HeaderContentType)) {
		return fiber.NewError(fiber.StatusUnsupportedMediaType, "Content-Type must be application/json.")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return spec.Errorf(spec.EINVALID, "The request body is empty; send a JSON object.")
	}
	if err := checkKeys(body, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonDecodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return spec.Errorf(spec.EINVALID, "The request body must hold exactly one JSON object.")
	}
	return nil
}

func isJSONContentType(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// jsonDecodeError turns an encoding/json error into a user-safe EINVALID
// error, with the offending field when known.
func jsonDecodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return spec.Errorf(spec.EINVALID, "The request body is not valid JSON (error at byte %d).", syn.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return spec.Errorf(spec.EINVALID, "The request body is not valid JSON (it ends early).")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return spec.Errorf(spec.EINVALID, "The request body must be %s, not %s.", describeType(typ.Type), typ.Value)
		}
		return spec.FieldError(typ.Field, "%s must be %s, not %s.", typ.Field, describeType(typ.Type), typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return spec.FieldError(name, "Unknown field %q.", name)
	}
	return spec.Errorf(spec.EINVALID, "The request body could not be read as JSON.")
}

// describeType names a Go type the way a JSON user thinks of it.
func describeType(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a different type"
}

// queryInt parses the query parameter name as an integer in [lo, hi],
// returning def when it is absent.
func queryInt(c *fiber.Ctx, name string, def, lo, hi int64) (int64, error) {
	raw := c.Query(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, spec.FieldError(name, "%s must be a whole number from %d to %d.", name, lo, hi)
	}
	return n, nil
}

// searchText validates the search text q of the query parameter name: valid
// UTF-8 of at most max characters with no control characters (a NUL would
// end the full-text query early, and none has a meaning in a search). The
// error names the parameter.
func searchText(name, q string, max int) error {
	if !utf8.ValidString(q) {
		return spec.FieldError(name, "The search is not valid UTF-8 text.")
	}
	if utf8.RuneCountInString(q) > max {
		return spec.FieldError(name, "The search must be at most %d characters.", max)
	}
	for _, r := range q {
		if unicode.IsControl(r) {
			return spec.FieldError(name, "The search must not contain control characters (found %U).", r)
		}
	}
	return nil
}

// plainText reports whether s is valid UTF-8 without control characters:
// what an id or a name taken from a request may hold.
func plainText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// parseID parses a positive integer id.
func parseID(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("invalid id")
	}
	return n, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// timeOrNil returns t in UTC, or nil (JSON null) when it is zero.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// rawOrNull returns raw, or JSON null when it is empty.
func rawOrNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
