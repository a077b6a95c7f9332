package oauth2_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/keygate/keygate/internal/testsupport/oauth2test"
)

func BenchmarkAuthenticate(b *testing.B) {
	rsaS := oauth2test.RSA(b, 0, "rsa-1")
	ecS := oauth2test.NewEC(b, "ec-1")
	is := oauth2test.NewIssuer(b, rsaS, ecS)
	a := newAuthenticator(b, is, nil)
	for _, bc := range []struct {
		name string
		s    oauth2test.Signer
	}{{"RS256", rsaS}, {"ES256", ecS}} {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodPost, "https://keygate.test/sync", nil)
			r.Header.Set("Authorization", "Bearer "+oauth2test.Mint(b, bc.s, claims()))
			b.ReportAllocs()
			for b.Loop() {
				v, err := a.Authenticate(r)
				if err != nil || !v.OK {
					b.Fatalf("%+v, %v", v, err)
				}
			}
		})
	}
	b.Run("refused garbage", func(b *testing.B) {
		r := bearerRequest("abc.def.ghi")
		b.ReportAllocs()
		for b.Loop() {
			if v, _ := a.Authenticate(r); v.OK {
				b.Fatal("accepted")
			}
		}
	})
}
