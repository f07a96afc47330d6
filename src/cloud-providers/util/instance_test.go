package util

import (
	"strings"
	"testing"
)

func TestGenerateInstanceName(t *testing.T) {
	cases := []struct {
		pod, sid string
		max      int
		want     string
	}{
		{"llm-0", "ABCDEF1234567890", 0, "podvm-llm-0-abcdef12"},
		{"My_Pod.1", "abc", 0, "podvm-my-pod-1-abc"},
		{strings.Repeat("x", 80), "0123456789", 63, "podvm-" + strings.Repeat("x", 48) + "-01234567"},
	}
	for _, tc := range cases {
		got := GenerateInstanceName(tc.pod, tc.sid, tc.max)
		if got != tc.want {
			t.Errorf("GenerateInstanceName(%q, %q, %d) = %q, want %q", tc.pod, tc.sid, tc.max, got, tc.want)
		}
		if tc.max > 0 && len(got) > tc.max {
			t.Errorf("%q is longer than %d", got, tc.max)
		}
	}
}

func TestGenerateInstanceNamePanicsWhenMaxTooSmall(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("want a panic for a max that cannot hold prefix and sandbox")
		}
	}()
	GenerateInstanceName("p", "s", 10)
}
