// Package keystoretest writes keystore files for tests: fixtures of keys
// and consumers in the file keystore's format.
package keystoretest

import (
	"os"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/keygate/keygate/keystore"
)

// WriteFile writes a keystore file at path holding keys and consumers.
func WriteFile(t testing.TB, path string, keys []keystore.Record, consumers []keystore.Consumer) {
	t.Helper()
	doc := struct {
		Version   int                 `yaml:"version"`
		Keys      []keystore.Record   `yaml:"keys"`
		Consumers []keystore.Consumer `yaml:"consumers"`
	}{keystore.FileVersion, keys, consumers}
	b, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// OpenFile opens the file keystore at path and closes it when the test
// ends.
func OpenFile(t testing.TB, path string) *keystore.FileStore {
	t.Helper()
	store, err := keystore.OpenFile(keystore.FileConfig{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// Mistype returns key with its last character changed to a different one,
// the one-character typo a key's checksum exists to catch. (Replacing the
// last character with a fixed one is no typo when the key already ends in
// it.)
func Mistype(key string) string {
	last := key[len(key)-1]
	c := byte('a')
	if last == c {
		c = 'b'
	}
	return key[:len(key)-1] + string(c)
}
