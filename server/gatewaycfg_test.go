package server

import (
	"reflect"
	"testing"
	"time"

	"github.com/keygate/keygate/config"
)

// TestGatewayConfigMapsEveryField: every field of the configuration
// file's upstreams and deprecation types reaches the gateway's type of
// the same name, so a field added to one side and not the other fails
// here rather than being dropped silently.
func TestGatewayConfigMapsEveryField(t *testing.T) {
	up := config.UpstreamConfig{Targets: []string{"http://127.0.0.1:1"}, Timeout: 3 * time.Second, DialTimeout: 4 * time.Second, MaxIdleConnsPerHost: 5, IdleTimeout: 6 * time.Second}
	dep := config.DeprecationConfig{Date: time.Unix(1, 0), Sunset: time.Unix(2, 0), Link: "https://example.test/migrate"}
	for _, tc := range []struct {
		name     string
		from, to any
	}{
		{"upstream", up, gatewayUpstream(up)},
		{"upstreams.extraction", up, gatewayUpstreams(config.UpstreamsConfig{Extraction: up}).Extraction},
		{"upstreams.registry", up, gatewayUpstreams(config.UpstreamsConfig{Registry: up}).Registry},
		{"deprecation", dep, gatewayDeprecation(dep)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := reflect.ValueOf(tc.from), reflect.ValueOf(tc.to)
			if from.NumField() != to.NumField() {
				t.Fatalf("%s has %d fields, %s %d", from.Type(), from.NumField(), to.Type(), to.NumField())
			}
			for i := range from.NumField() {
				f := from.Type().Field(i)
				if from.Field(i).IsZero() {
					t.Fatalf("the test sets no value for %s.%s", from.Type(), f.Name)
				}
				got := to.FieldByName(f.Name)
				if !got.IsValid() {
					t.Errorf("%s has no field %s", to.Type(), f.Name)
					continue
				}
				if !reflect.DeepEqual(got.Interface(), from.Field(i).Interface()) {
					t.Errorf("%s: %v reaches the gateway as %v", f.Name, from.Field(i), got)
				}
			}
		})
	}
}
