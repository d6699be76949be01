package main

import (
	"strings"
	"testing"
	"time"
)

func TestShutdownGraceFlag(t *testing.T) {
	noEnv := func(string) string { return "" }
	for _, tc := range []struct {
		args  []string
		grace time.Duration
		err   string
	}{
		{nil, 10 * time.Second, ""},
		{[]string{"--shutdown-grace", "3s"}, 3 * time.Second, ""},
		{[]string{"--shutdown-timeout", "6s"}, 3 * time.Second, ""}, // the default fits a short bound
		{[]string{"--shutdown-grace", "30s"}, 0, "shorter than --shutdown-timeout"},
		{[]string{"--shutdown-grace", "0s"}, 0, "--shutdown-grace must be positive"},
	} {
		cfg, err := parseServeConfig(tc.args, noEnv)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err = %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || cfg.ShutdownGrace != tc.grace {
			t.Errorf("%v: grace %v, err %v; want %s", tc.args, cfg, err, tc.grace)
		}
	}
}
