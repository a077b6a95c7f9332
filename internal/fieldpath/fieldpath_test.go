package fieldpath_test

import (
	"errors"
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
	if fieldpath.Within("auth.oauth2", other) != other {
		t.Fatal("Within changed an error that is not about a field")
	}
	if fieldpath.Within("tls", nil) != nil {
		t.Fatal("Within(nil) is not nil")
	}
}
