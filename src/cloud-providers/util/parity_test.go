package util

import (
	"strconv"
	"testing"
)

// Expectations are what upstream's GenerateInstanceName returns at v0.22.0
// (commit 38d0fcf7, src/cloud-providers/util/instance.go line 26), measured
// by running that code on these inputs: names are lower-cased, every rune
// outside [a-z0-9-] (invalid UTF-8 bytes included) becomes '-', the sandbox
// part is its first 8 characters, and with podvmNameMax > 0 the pod part is
// cut so the name fits, panicking when not even prefix and sandbox fit.
// (Upstream also prints "podNameLen: N" to stdout when it cuts; the fork does
// not write to stdout.)
func TestGenerateInstanceNameAsUpstream(t *testing.T) {
	for _, tc := range []struct {
		pod, sid string
		max      int
		want     string
	}{
		{"llm-0", "ABCDEF1234567890", 0, "podvm-llm-0-abcdef12"},
		{"My_Pod.1", "abc", 0, "podvm-my-pod-1-abc"},
		{"pod", "", 0, "podvm-pod-"},
		{"", "abc", 0, "podvm--abc"},
		{"Ünïcode-ß", "Ab_Cd.Ef-GhIj", 0, "podvm--n-code---ab-cd-ef"},
		{"a\xffb", "s\xfe", 0, "podvm-a-b-s-"},
		{"averyveryverylongpodname-with-many-parts", "0123456789", 30, "podvm-averyveryverylo-01234567"},
		{"p", "s", 15, "podvm--s"},
		{"pp", "s", 15, "podvm--s"},
		{"p", "0123456789", 16, "podvm-p-01234567"},
	} {
		if got := GenerateInstanceName(tc.pod, tc.sid, tc.max); got != tc.want {
			t.Errorf("GenerateInstanceName(%q, %q, %d) = %q; upstream gives %q", tc.pod, tc.sid, tc.max, got, tc.want)
		}
	}
	for _, max := range []int{14, 1} {
		func() {
			defer func() {
				r := recover()
				err, ok := r.(error)
				if !ok || err.Error() != "podvmNameMax is too small: "+strconv.Itoa(max) {
					t.Errorf("GenerateInstanceName with max %d panics with %v; upstream panics with the error \"podvmNameMax is too small: %d\"", max, r, max)
				}
			}()
			GenerateInstanceName("", "s", max)
		}()
	}
}
