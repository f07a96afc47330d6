package restart

import (
	"errors"
	"testing"
	"time"
)

func TestBudgetOnePerInterval(t *testing.T) {
	b := NewBudget(10*time.Minute, 3)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := b.Allow(t0); err != nil {
		t.Fatalf("first restart refused: %v", err)
	}
	b.Record(t0, nil)
	if err := b.Allow(t0.Add(9 * time.Minute)); !errors.Is(err, ErrTooSoon) {
		t.Fatalf("restart 9 min later: err = %v, want ErrTooSoon", err)
	}
	if err := b.Allow(t0.Add(10 * time.Minute)); err != nil {
		t.Fatalf("restart 10 min later refused: %v", err)
	}
}

func TestBudgetStopsAfterFailures(t *testing.T) {
	b := NewBudget(time.Minute, 3)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 3; i++ {
		if err := b.Allow(now); err != nil {
			t.Fatalf("attempt %d refused: %v", i+1, err)
		}
		b.Record(now, errors.New("unit failed"))
		now = now.Add(time.Hour)
	}
	if err := b.Allow(now); !errors.Is(err, ErrExhausted) {
		t.Fatalf("after 3 failures: err = %v, want ErrExhausted", err)
	}
	if b.Failures() != 3 {
		t.Fatalf("Failures = %d, want 3", b.Failures())
	}
}

func TestBudgetSuccessResetsFailures(t *testing.T) {
	b := NewBudget(time.Minute, 3)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.Record(now, errors.New("x"))
	b.Record(now.Add(time.Hour), errors.New("x"))
	b.Record(now.Add(2*time.Hour), nil)
	if b.Failures() != 0 {
		t.Fatalf("Failures = %d after a success, want 0", b.Failures())
	}
	b.Record(now.Add(3*time.Hour), errors.New("x"))
	if err := b.Allow(now.Add(4 * time.Hour)); err != nil {
		t.Fatalf("one failure after a success refused a restart: %v", err)
	}
}
