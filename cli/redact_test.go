package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/keygate/keygate/config"
)

// TestLoggerRedactsCredentials builds the logger serve uses and logs keys,
// bearer tokens and JWTs in every kind of field: none may be written.
func TestLoggerRedactsCredentials(t *testing.T) {
	const (
		random = "Zq3Lk9Wm2Xc7Vb5Nn1Pp8Rr4Tt6Yy0Uu2Ii4Oo6"
		key    = "svc_test_" + random
		jwt    = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ1In0.bXlzaWduYXR1cmU"
	)
	for _, format := range []string{"json", "console"} {
		var buf bytes.Buffer
		log, stop, err := newLogger(config.LogConfig{Level: "debug", Format: format}, &buf, nil)
		if err != nil {
			t.Fatal(err)
		}
		access := log.Named("access").With(zap.String("conn", key))
		access.Info("request",
			zap.String("method", key),
			zap.String("path", "/registry/"+key),
			zap.String("error", "no such endpoint: /"+strings.ToUpper(key[:9])+random),
			zap.Error(errors.New("authorization Bearer "+jwt)))
		zap.NewStdLog(log.Named("proxy")).Printf("http: proxy error: dial %s", key)
		log.Debug("jwt " + jwt)
		stop() // flush the buffered access lines
		out := buf.String()
		for _, s := range []string{random, jwt, "bXlzaWduYXR1cmU"} {
			if strings.Contains(out, s) {
				t.Errorf("%s: log holds %q:\n%s", format, s, out)
			}
		}
		if n := strings.Count(out, "[REDACTED]"); n < 7 {
			t.Errorf("%s: %d masks, want 7 or more:\n%s", format, n, out)
		}
	}
}
