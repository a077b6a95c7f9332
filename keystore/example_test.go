package keystore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keygate/keygate/keystore"
)

func ExampleGenerate() {
	key, err := keystore.Generate(keystore.Live)
	if err != nil {
		panic(err)
	}
	// Never print a real key; show its shape.
	fmt.Println(key[:9], len(key))
	env, err := keystore.Parse(key)
	fmt.Println(env, err)
	fmt.Println(strings.HasPrefix(keystore.HashKey(key).String(), "sha256:"))
	// Output:
	// svc_live_ 45
	// live <nil>
	// true
}

func ExampleParse() {
	key, _ := keystore.Generate(keystore.Test)
	env, err := keystore.Parse(key)
	fmt.Println(env, err)

	_, err = keystore.Parse("svc_prod_" + key[9:])
	fmt.Println(errors.Is(err, keystore.ErrMalformed), err)

	_, err = keystore.Parse(key + " ")
	fmt.Println(errors.Is(err, keystore.ErrMalformed), err)

	// A typo in the last character fails the checksum, with no lookup.
	typo := key[:len(key)-1] + map[bool]string{true: "B", false: "A"}[key[len(key)-1] == 'A']
	_, err = keystore.Parse(typo)
	fmt.Println(errors.Is(err, keystore.ErrChecksum), err)
	// Output:
	// test <nil>
	// true keystore: malformed key: prefix must be svc_live_ or svc_test_
	// true keystore: malformed key: contains whitespace
	// true keystore: key checksum mismatch
}

func ExampleFileAdmin() {
	dir, err := os.MkdirTemp("", "keystore-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keys.yaml")
	ctx := context.Background()

	admin := &keystore.FileAdmin{Path: path}
	key, rec, err := admin.Issue(ctx, keystore.IssueRequest{
		Product: keystore.Extraction,
		Env:     keystore.Test,
		Context: "3F2C8A1E-5B7D-4C9A-8E21-0D6F4B3A9C10",
		Name:    "ci",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(rec.Product, rec.Env, rec.Context, rec.Status)

	// The gateway looks the key up by its hash.
	store, err := keystore.OpenFile(keystore.FileConfig{Path: path})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	got, ok, err := store.Lookup(ctx, keystore.HashKey(key))
	fmt.Println(ok, err, got.ID == rec.ID, got.StateAt(time.Now()))
	// Output:
	// extraction test 3f2c8a1e-5b7d-4c9a-8e21-0d6f4b3a9c10 active
	// true <nil> true active
}
