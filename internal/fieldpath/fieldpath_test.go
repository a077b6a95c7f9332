package fieldpath_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/keygate/keygate/internal/fieldpath"
)

func TestWithin(t *testing.T) {
	err := fieldpath.Errorf("ca_file", "%w", fs.ErrNotExist)
	got := fieldpath.Within("auth.oauth2", err)
	if got.Error() != "auth.oauth2.ca_file: file does not exist" || !errors.Is(got, fs.ErrNotExist) {
		t.Fatalf("Within: %v", got)
	}
	other := errors.New("oauth2: start jwks cache: boom")
	if got := fieldpath.Within("auth.oauth2", other); !errors.Is(got, other) || got.Error() != other.Error() {
		t.Fatal("Within changed an error that is not about a field")
	}
	if fieldpath.Within("tls", nil) != nil {
		t.Fatal("Within(nil) is not nil")
	}
}

// A field error wrapped in other text is left as it is.
func TestWithinLeavesWrappedFieldErrors(t *testing.T) {
	inner := fieldpath.Errorf("ca_root", "%w", fs.ErrNotExist)
	wrapped := fmt.Errorf("starting: %w", inner)
	if got := fieldpath.Within("tls", wrapped); got.Error() != "starting: ca_root: file does not exist" {
		t.Fatalf("Within: %v", got)
	}
}
