package crashtest

import "testing"

func TestPoint_FiresOnNthPass(t *testing.T) {
	fired := 0
	exit = func() { fired++ }
	defer func() { exit = nil; Configure("", 0) }()
	if err := Configure("after_post", 3); err != nil {
		t.Fatal(err)
	}
	Point("after_decode")
	Point("after_post")
	Point("after_post")
	if fired != 0 {
		t.Fatal("fired early")
	}
	Point("after_post")
	if fired != 1 {
		t.Fatalf("fired = %d, want 1", fired)
	}
}

func TestConfigure_Rejects(t *testing.T) {
	if err := Configure("after_lunch", 1); err == nil {
		t.Fatal("unknown point accepted")
	}
	if err := Configure("after_ack", 0); err == nil {
		t.Fatal("zero batches accepted")
	}
}
