package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/keygate/keygate/config"
	"github.com/keygate/keygate/policy"
)

// TestExamplePlansParse un-comments the plans example of
// config.example.yaml and parses it, so the example cannot drift.
func TestExamplePlansParse(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "  # plans:"):
			in = true
		case in && strings.HasPrefix(line, "  #   "):
		default:
			in = false
		}
		if in {
			doc = append(doc, "  "+strings.TrimPrefix(line, "  # "))
		}
	}
	if len(doc) < 2 {
		t.Fatal("config.example.yaml has no commented plans example")
	}
	c, err := config.Parse([]byte("ratelimit:\n" + strings.Join(doc, "\n") + "\n"))
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(doc, "\n"))
	}
	if len(c.RateLimit.Plans) != len(doc)-1 || c.RateLimit.Plans["team"].Scope != policy.ScopeConsumer {
		t.Errorf("plans = %+v", c.RateLimit.Plans)
	}
}
