package checks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"homework/engine/spec"
)

// Story is one user story of a prd.json.
type Story struct {
	ID     string
	Title  string
	Passes bool
}

// ParsePRD parses a prd.json: {"userStories": [...]}, {"stories": [...]} or
// a top-level array of stories, each with an id (string or number), a title
// and passes. It returns an error for malformed JSON or a document with no
// stories list.
func ParsePRD(data []byte) ([]Story, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("the file is empty")
	}
	var raw []json.RawMessage
	if data[0] == '[' {
		if err := json.Unmarshal(data, &raw); err != nil {
			return nil, fmt.Errorf("invalid JSON: %v", err)
		}
	} else {
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("invalid JSON: %v", err)
		}
		list, ok := doc["userStories"]
		if !ok {
			list, ok = doc["stories"]
		}
		if !ok {
			return nil, fmt.Errorf("no \"userStories\" or \"stories\" list")
		}
		if err := json.Unmarshal(list, &raw); err != nil {
			return nil, fmt.Errorf("the stories are not a list: %v", err)
		}
	}
	stories := make([]Story, 0, len(raw))
	for i, r := range raw {
		var s struct {
			ID     any    `json:"id"`
			Title  string `json:"title"`
			Passes any    `json:"passes"`
		}
		if err := json.Unmarshal(r, &s); err != nil {
			return nil, fmt.Errorf("story %d is not an object: %v", i+1, err)
		}
		st := Story{Title: s.Title}
		switch id := s.ID.(type) {
		case string:
			st.ID = id
		case float64:
			st.ID = fmt.Sprint(id)
		}
		// Only a JSON true passes; "true", 1 or a missing field do not.
		st.Passes = s.Passes == true
		stories = append(stories, st)
	}
	return stories, nil
}

func runPRD(ctx context.Context, c spec.CheckSpec, env Env) spec.CheckResult {
	p := c.Path
	if p == "" {
		p = DefaultPRDPath
	}
	content, found, r := readDocument(ctx, env, p)
	if r != nil {
		return *r
	}
	if !found {
		return spec.CheckResult{Message: fmt.Sprintf("%s does not exist.", p)}
	}
	stories, err := ParsePRD([]byte(content))
	if err != nil {
		return spec.CheckResult{Message: fmt.Sprintf("%s cannot be read: %v.", p, err)}
	}
	if len(stories) == 0 {
		return spec.CheckResult{Message: fmt.Sprintf("%s has no stories.", p)}
	}
	var failing []string
	for i, s := range stories {
		if !s.Passes {
			failing = append(failing, storyName(i, s))
		}
	}
	if len(failing) == 0 {
		return spec.CheckResult{Passed: true, Message: fmt.Sprintf("All %d stories in %s pass.", len(stories), p)}
	}
	const show = 10
	list := failing
	more := ""
	if len(list) > show {
		list, more = list[:show], fmt.Sprintf(" and %d more", len(failing)-show)
	}
	return spec.CheckResult{Message: fmt.Sprintf("%d of %d stories in %s do not pass: %s%s.",
		len(failing), len(stories), p, strings.Join(list, ", "), more)}
}

func storyName(i int, s Story) string {
	switch {
	case s.ID != "" && s.Title != "":
		return fmt.Sprintf("%s (%s)", s.ID, excerpt(s.Title, 80))
	case s.ID != "":
		return s.ID
	case s.Title != "":
		return excerpt(s.Title, 80)
	default:
		return fmt.Sprintf("story %d", i+1)
	}
}
