// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"strings"
	"testing"
)

// 403 userRateLimitExceeded is a rate limit (clears within the minute),
// retried like 429 with the same requestId, not a fatal permission error.
func TestUserRateLimitIsRetried(t *testing.T) {
	p, fake := newTestProvider(t, nil)
	fake.FailNextReason("POST", "instances.insert", 403, "userRateLimitExceeded", 2)
	if _, err := p.CreateInstance(context.Background(), "llm-0", sandbox, cloudConfig("llm-0"), oneT4); err != nil {
		t.Fatalf("create after two 403 userRateLimitExceeded: %v", err)
	}
	if n := fake.CountCalls("instances.insert"); n != 3 {
		t.Errorf("inserts = %d, want 3", n)
	}
	// A 403 that is not a rate limit stays fatal.
	fake.FailNextReason("POST", "instances.insert", 403, "forbidden", 1)
	if _, err := p.CreateInstance(context.Background(), "llm-1", strings.Repeat("d", 64), cloudConfig("llm-1"), oneT4); err == nil {
		t.Fatal("403 forbidden was retried into success")
	}
}
