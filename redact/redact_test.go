package redact

import (
	"errors"
	"strings"
	"testing"
)

const key = "svc_live_4f9Qk2ZpR7xT1mWcB8nLd3HsVy6Ja0EuKg5rNo"

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, in, want string }{
		{"nothing", "GET /sync 200", "GET /sync 200"},
		{"empty", "", ""},
		{"underscores only", "trace_id key_id bytes_in svc_ svc_live_", "trace_id key_id bytes_in svc_ svc_live_"},
		{"key alone", key, "svc_live_[REDACTED]"},
		{"key in a path", "/registry/" + key + "/x", "/registry/svc_live_[REDACTED]/x"},
		{"key as a method", key + " / HTTP/1.1", "svc_live_[REDACTED] / HTTP/1.1"},
		{"test key, odd case", "SVC_Test_abc123", "SVC_Test_[REDACTED]"},
		{"key glued to a word", "x" + key + "-y", "xsvc_live_[REDACTED]-y"},
		{"two keys", key + "," + key, "svc_live_[REDACTED],svc_live_[REDACTED]"},
		{"other env", "svc_prod_abc", "svc_prod_abc"},
		{"admin token", "token=kga_4f9Qk2ZpR7xT1mWcB8nLd3HsVy6Ja0EuKg5rNo;", "token=kga_[REDACTED];"},
		{"kga_ alone", "kga_ kga_-x", "kga_ kga_-x"},
		{"bearer", "Authorization: Bearer abc.def-ghi~+/==", "Authorization: Bearer [REDACTED]"},
		{"bearer, odd case and tab", "bEaReR\tTOKEN123 rest", "bEaReR\t[REDACTED] rest"},
		{"bearer auth-param", `Bearer realm="keygate", error="invalid_token"`, `Bearer realm="keygate", error="invalid_token"`},
		{"bearer word alone", "bearer token missing", "bearer [REDACTED] missing"},
		{"jwt", "token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln-_x rest", "token [REDACTED] rest"},
		{"unsigned jwt", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "[REDACTED]"},
		{"eyJ without dots", "eyJhbGciOiJub25lIn0", "eyJhbGciOiJub25lIn0"},
		{"bearer jwt", "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "Bearer [REDACTED]"},
		{"mixed", "a " + key + " b Bearer x c", "a svc_live_[REDACTED] b Bearer [REDACTED] c"},
	}
	for _, tt := range tests {
		if got := String(tt.in); got != tt.want {
			t.Errorf("%s: String(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
		if got := Contains(tt.in); got != (tt.in != tt.want) {
			t.Errorf("%s: Contains = %v", tt.name, got)
		}
	}
}

func TestStringDoesNotAllocateWithoutSecrets(t *testing.T) {
	s := strings.Repeat("/registry/schemas?page=2 trace_id=0af7651916cd43dd8448eb211c80319c ", 4)
	if n := testing.AllocsPerRun(100, func() { _ = String(s) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
	_ = errors.New
}

func BenchmarkString(b *testing.B) {
	for _, bc := range []struct{ name, s string }{
		{"clean", "POST /sync 127.0.0.1:53122 0af7651916cd43dd8448eb211c80319c upstream unavailable: dial tcp"},
		{"key", "POST /registry/" + key},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = String(bc.s)
			}
		})
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{key, "Bearer abc", "eyJa.b.c", "svc_test_x", "bearer realm=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := String(s)
		if Contains(r) {
			t.Fatalf("String(%q) = %q still holds a secret", s, r)
		}
		if !Contains(s) && r != s {
			t.Fatalf("String changed %q to %q", s, r)
		}
	})
}
