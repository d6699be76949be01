package engine

import (
	"fmt"
	"strings"
	"unicode"

	"homework/engine/spec"
)

// Tag limits.
const (
	MaxTags     = 10
	MaxTagBytes = 32
)

// NormalizeTags validates a run's tags and returns them trimmed, lowercased
// and without duplicates, in the order given. A tag is 1 to MaxTagBytes
// bytes of letters, digits and - _ . : /, so it reads well in a URL, a chart
// legend and a CSV cell. field names the input in errors ("tags" for a run,
// "tag" for a filter). Problems are EINVALID with the field.
func NormalizeTags(field string, tags []string) ([]string, error) {
	if len(tags) > MaxTags {
		return nil, spec.FieldError(field, "At most %d tags.", MaxTags)
	}
	var out []string
	seen := map[string]bool{}
	for i, t := range tags {
		t = strings.ToLower(strings.TrimSpace(t))
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := checkTag(f, t); err != nil {
			return nil, err
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}

// NormalizeTag validates one tag, as a filter takes it.
func NormalizeTag(field, t string) (string, error) {
	t = strings.ToLower(strings.TrimSpace(t))
	return t, checkTag(field, t)
}

func checkTag(field, t string) error {
	switch {
	case t == "":
		return spec.FieldError(field, "A tag must not be empty.")
	case len(t) > MaxTagBytes:
		return spec.FieldError(field, "A tag is at most %d bytes.", MaxTagBytes)
	case strings.ContainsFunc(t, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune("-_.:/", r)
	}):
		return spec.FieldError(field, "A tag may hold letters, digits and - _ . : / only.")
	}
	return nil
}
