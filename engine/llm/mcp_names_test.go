package llm

import (
	"strings"
	"testing"
)

func TestToolNamesFitTheEndpoint(t *testing.T) {
	long := "mcp__server__" + strings.Repeat("a", 80)
	for _, tc := range []struct {
		name, in string
		taken    []string
		want     string
	}{
		{name: "a plain name is kept", in: "mcp__test__echo", want: "mcp__test__echo"},
		{name: "characters endpoints refuse become underscores", in: "mcp__my.server__read file", want: "mcp__my_server__read_file"},
		{name: "a taken name gets a number", in: "mcp__a__b.c", taken: []string{"mcp__a__b_c"}, want: "mcp__a__b_c_2"},
		{name: "a long name keeps its start and a hash of the whole", in: long, want: long[:55] + "_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			taken := map[string]bool{}
			for _, n := range tc.taken {
				taken[n] = true
			}
			got := toolName(tc.in, taken)
			if len(got) > maxToolName || badToolRune.MatchString(got) {
				t.Fatalf("%q is not a valid function name", got)
			}
			if !strings.HasPrefix(got, tc.want) || (tc.in != long && got != tc.want) {
				t.Errorf("toolName(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	t.Run("two long names that share their start stay apart", func(t *testing.T) {
		taken := map[string]bool{}
		a := toolName(long+"x", taken)
		taken[a] = true
		b := toolName(long+"y", taken)
		if a == b || len(b) > maxToolName {
			t.Errorf("%q and %q", a, b)
		}
	})
}
