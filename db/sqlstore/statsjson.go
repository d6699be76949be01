package sqlstore

import (
	"encoding/json"
	"errors"
	"strconv"
)

// text is JSON as the drivers give it: a string (no copy of SQLite's text)
// or bytes.
type text interface{ string | []byte }

// scanMetrics reads the report's fields from a run's metrics JSON. The
// report reads every run in its window, and encoding/json spends most of
// that time skipping the per-model usage; this reads the top-level members
// only and skips other values without decoding them. Anything it does not
// expect (escapes in a key, a non-integer count) falls back to
// encoding/json, so the answer is always what json.Unmarshal gives.
func scanMetrics[T text](b T, m *statsMetrics) error {
	if fastMetrics(b, m) {
		return nil
	}
	// Decoded into a variable of its own: m, not escaping, stays on the
	// caller's stack.
	var v statsMetrics
	err := json.Unmarshal([]byte(b), &v)
	*m = v
	return err
}

func fastMetrics[T text](b T, m *statsMetrics) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipWS(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				return false
			}
			j++
		}
		if j >= len(b) {
			return false
		}
		key := b[i+1 : j]
		i = skipWS(b, j+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipWS(b, i+1)
		var ok bool
		switch string(key) {
		case "iterations":
			var v int64
			v, i, ok = scanInt(b, i)
			m.Iterations = int(v)
		case "running_ms":
			m.RunningMS, i, ok = scanInt(b, i)
		case "tokens_total":
			m.TokensTotal, i, ok = scanInt(b, i)
		case "tool_calls_total":
			var v int64
			v, i, ok = scanInt(b, i)
			m.ToolCallsTotal = int(v)
		case "false_completions_blocked":
			var v int64
			v, i, ok = scanInt(b, i)
			m.FalseCompletionsBlocked = int(v)
		case "cost_total_usd":
			j := scanNumber(b, i)
			var err error
			m.CostTotalUSD, err = strconv.ParseFloat(string(b[i:j]), 64)
			i, ok = j, err == nil
		default:
			i, ok = skipValue(b, i)
		}
		if !ok {
			return false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return skipWS(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipWS[T text](b T, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

func scanNumber[T text](b T, i int) int {
	for i < len(b) && (b[i] >= '0' && b[i] <= '9' || b[i] == '-' || b[i] == '+' || b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		i++
	}
	return i
}

func scanInt[T text](b T, i int) (int64, int, bool) {
	j := scanNumber(b, i)
	v, err := strconv.ParseInt(string(b[i:j]), 10, 64)
	return v, j, err == nil
}

// skipValue skips one JSON value starting at i and returns the index after
// it. It checks structure (balanced brackets, closed strings), not every
// detail of the grammar: the document came from our own json.Marshal.
func skipValue[T text](b T, i int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			case '"':
				j, ok := skipString(b, i)
				if !ok {
					return j, false
				}
				i = j
				continue
			}
			i++
		}
		return i, false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	return j, j > i
}

func skipString[T text](b T, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return len(b), false
}

// jsonMember returns the raw value of the top-level member key of the JSON
// object b, and whether there is one. The common case (keys without
// escapes) is a scan that skips the other values; anything else is
// encoding/json's. A JSON null or a non-object has no members.
func jsonMember[T text](b T, key string) (T, bool, error) {
	if v, found, ok := fastMember(b, key); ok {
		return v, found, nil
	}
	var none T
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(b), &m); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return none, false, nil // not an object
		}
		return none, false, err
	}
	v, found := m[key]
	return T(v), found, nil
}

// jsonPath returns the text of the member at keys of the JSON object b, as
// jsonText reads it; "" when there is none.
func jsonPath[T text](b T, keys ...string) (string, error) {
	for _, k := range keys {
		v, found, err := jsonMember(b, k)
		if err != nil || !found {
			return "", err
		}
		b = v
	}
	return jsonText(b)
}

// jsonText is a JSON value as text, as json_extract and ->> give it: a
// string unquoted, null (or nothing) "", any other value its JSON.
func jsonText[T text](v T) (string, error) {
	switch {
	case len(v) == 0 || string(v) == "null":
		return "", nil
	case v[0] != '"':
		return string(v), nil
	case !hasBackslash(v) && len(v) >= 2 && v[len(v)-1] == '"':
		return string(v[1 : len(v)-1]), nil
	}
	var s string
	err := json.Unmarshal([]byte(v), &s)
	return s, err
}

// fastMember is jsonMember's scan; ok is false when it cannot tell (an
// escaped key, something malformed, not an object).
func fastMember[T text](b T, key string) (v T, found, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return v, false, false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return v, false, skipWS(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return v, false, false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' {
			if b[j] == '\\' {
				return v, false, false
			}
			j++
		}
		if j >= len(b) {
			return v, false, false
		}
		k := b[i+1 : j]
		i = skipWS(b, j+1)
		if i >= len(b) || b[i] != ':' {
			return v, false, false
		}
		i = skipWS(b, i+1)
		start := i
		i, ok = skipValue(b, i)
		if !ok {
			return v, false, false
		}
		if string(k) == key {
			// The first member of that name, as json_extract reads it.
			return b[start:i], true, true
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return v, false, false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return v, false, skipWS(b, i+1) == len(b)
		default:
			return v, false, false
		}
	}
}

func hasBackslash[T text](b T) bool {
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' {
			return true
		}
	}
	return false
}
