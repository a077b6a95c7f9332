package tokenissuer_test

import (
	"context"
	"testing"
)

// BenchmarkVerifyParallel is a bearer request's token check, from every
// core at once: the signature, the claims, the key's reference (the
// replica's cache) and its record. "again" is a token used before, as a
// client uses its token until it expires; "first use" is a token never
// seen before (its signature is checked).
func BenchmarkVerifyParallel(b *testing.B) {
	for _, alg := range []string{"ES256", "EdDSA"} {
		b.Run(alg+"/again", func(b *testing.B) {
			f := newFixture(b, alg)
			tok := f.token(b)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					v, err := f.iss.Verify(ctx, tok)
					if err != nil || !v.OK {
						b.Errorf("verify: %+v %v", v, err)
						return
					}
				}
			})
		})
		b.Run(alg+"/first use", func(b *testing.B) {
			f := newFixture(b, alg)
			toks := make(chan string, b.N)
			for range b.N {
				toks <- f.token(b)
			}
			close(toks)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					v, err := f.iss.Verify(ctx, <-toks)
					if err != nil || !v.OK {
						b.Errorf("verify: %+v %v", v, err)
						return
					}
				}
			})
		})
	}
}
