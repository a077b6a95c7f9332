package redistest

import "testing"

func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	if out, err := s.Do("SET", "k", "v"); err != nil || out != "OK" {
		t.Fatalf("SET = %q, %v", out, err)
	}
	if out, err := s.Do("GET", "k"); err != nil || out != "v" {
		t.Fatalf("GET = %q, %v", out, err)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if out, err := s.Do("PING"); err != nil || out != "PONG" {
		t.Fatalf("PING after Restart = %q, %v", out, err)
	}
}
