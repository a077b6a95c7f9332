package auth_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/keygate/keygate/auth"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/policy"
)

// oneRecord is a store that knows one record, with its resolved limit.
type oneRecord struct{ rec keystore.Record }

func (s oneRecord) Lookup(_ context.Context, h keystore.Hash) (keystore.Record, bool, error) {
	return s.rec, h == s.rec.Hash, nil
}

// TestPrincipalCarriesTheResolvedLimit: the key's principal carries the
// limit its store resolved, the same value (no copy, no lookup).
func TestPrincipalCarriesTheResolvedLimit(t *testing.T) {
	t.Parallel()
	key, _ := keystore.Generate(keystore.Live)
	eff := &policy.Effective{Limit: policy.Limit{Rate: 1, Per: 1, Burst: 1}, ID: "con_c"}
	rec := keystore.Record{ID: "key_a", Hash: keystore.HashKey(key), Product: keystore.Registry, Env: keystore.Live, Status: keystore.Active, Limits: eff}
	k, err := auth.NewAPIKeys(auth.APIKeysConfig{Store: oneRecord{rec}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/registry", nil)
	r.Header.Set("X-Api-Key", key)
	v, err := k.Authenticate(r)
	if err != nil || !v.OK || v.Principal.Limits != eff {
		t.Errorf("verdict %+v, %v; want the record's resolved limit", v, err)
	}
}
